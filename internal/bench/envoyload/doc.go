// Package envoyload is the HTTP benchmark through Envoy (make bench-envoy):
// a fixed-concurrency HTTP load from Go through Envoy 1.40 to a trivial
// upstream, at 1, 16 and 64 connections, in one run for four setups: no
// rate-limit filter; the filter calling the no-op RateLimitService
// (internal/bench/trivialrls); the filter calling the ratelimit binary on
// the embedded store; and on DynamoDB Local (one replica). It reports
// throughput, p50 and p99 latency, the latency a decision adds over the
// no-op service, and the CPU time per request of each process, as a
// Markdown table for BENCHMARKS.md.
//
// The benchmark is a test behind the envoybench build tag, so that `go test
// ./...` does not run it:
//
//	go test -tags envoybench -run TestEnvoyLoad -v -timeout 30m ./internal/bench/envoyload
//
// Knobs (environment): DURATION (measured time per run, default 10s),
// WARMUP (default 2s), CONNS (default 1,16,64), SETUPS (default
// none,trivial,memory,dynamodb), ROUNDS (default 1), BENCH_OUT (a file that
// receives the tables too).
//
// Every request must be answered 200, and for the setups with the filter
// Envoy must count every one of them as an OK decision; otherwise the
// benchmark fails. On DynamoDB Local, which serialises writes, decisions
// that run out of BACKEND_TIMEOUT (500ms) are refused (ON_UNAVAILABLE=block)
// and counted in the "not 200" column instead; latencies are of the 200
// answers. It uses internal/envoytest for Envoy, the binary and the
// upstream, and internal/dynamotest for DynamoDB Local.
//
// TestPeers (make bench-peers) is the side-by-side with other rate-limit
// services: ours (embedded store), the no-op service, Kuadrant's Limitador
// (in-memory storage) and envoyproxy/ratelimit (on a Redis of its own),
// each in turn behind the same Envoy, with the route asking for one
// descriptor api_key=<x-api-key header> on one hot key and a limit of a
// billion a second. wrk (2 threads, testdata/wrk-report.lua for its
// summary) drives the load at CONNS (default 16,64) connections for
// DURATION after WARMUP, for ROUNDS rounds (default 3), the order of the
// servers rotating from round to round. Before anything is timed, each
// server runs with a limit of one a minute and must refuse the second
// request of a key through Envoy and over gRPC, so that a server that never
// sees the descriptor fails the run. It reports each run, the medians per
// server and connection count, and ours against Limitador and the no-op
// service; then it starts the servers once more and runs
// internal/bench/grpc.sh on them (TARGETS: ghz, one hot key, no Envoy).
// The peers are located by internal/bench/peers.sh (this repository
// builds none of them); a missing one is named in the report with what to do, and the
// others run. SERVERS narrows the list; BENCH_OUT=DIR keeps the report,
// wrk's output and grpc.sh's files. CALLERS (default 50) is ghz's callers;
// ENVOY=0 runs only the gRPC part; PIN_GRPC=S,D holds each server and its
// Redis to core S (GOMAXPROCS=1) and ghz to core D, with taskset, so that
// the servers have the same CPU and the driver's is not theirs.
package envoyload
