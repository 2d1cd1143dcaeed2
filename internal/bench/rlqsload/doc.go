// Package rlqsload holds the Rate Limit Quota Service (RLQS) benchmarks
// through the built binary (docs/rlqs.md, BENCHMARKS.md "RLQS"). Both are
// tests behind the rlqsbench build tag, so that `go test ./...` does not
// run them.
//
// TestRLQSLatency (make bench-rlqs) times sequential requests through
// Envoy 1.40 of three kinds, in one run: a request of an RLQS bucket on
// examples/envoy/envoy-rlqs.yaml (Envoy decides locally on its
// assignment), a request no bucket matches on the same Envoy (no rate
// limiting), and a request of the plain example examples/envoy/envoy.yaml
// (a ShouldRateLimit call per request, RLS). The kinds alternate in
// blocks of BLOCK requests (default 50) for ROUNDS rounds (default 400:
// 20,000 requests of each kind), the first kind of a round rotating, so
// that the machine's noise falls on every kind alike, after WARMUP
// (default 7s: Envoy's first report and assignment) of the same. It
// reports p50, p90, p99 and p99.9 per kind, what RLQS and RLS add over no
// rate limiting, and the same for each quarter of the rounds; it fails
// when RLQS's p99 is more than MAX_ADDED_P99 (default 0.2ms) over no rate
// limiting's, or when any request is not answered 200. The descriptor
// rules are testdata/config, the examples' with limits no run reaches.
//
// TestRLQSMemory (make bench-rlqs-memory) starts the binary on the
// embedded store with testdata/config, opens STREAMS RLQS streams
// (default 1,000) over CONNS gRPC connections (default 4), and reports
// BUCKETS distinct buckets on each (default 1,000; a bucket id of one key,
// tenant, matching the tenant rule), waits for every bucket's assignment,
// and reads the binary's VmRSS and VmHWM from /proc/PID/status every 2 s
// for HOLD (default 30s) while the streams stay open, with its Go heap
// from /metrics. It fails when the peak resident set (VmHWM) passes
// RSS_BOUND_MIB (default 6144, the bound docs/rlqs.md states for the
// default GOGC). The binary inherits the environment: GOMEMLIMIT=3GiB
// RSS_BOUND_MIB=3584 runs it under a memory limit. HEAP_PROFILE=file
// keeps the binary's heap profile at the end. RLQS_ABANDON_AFTER is 10m,
// so that buckets that reported once are not abandoned within the run.
//
//	go test -tags rlqsbench -run TestRLQSLatency -count=1 -v ./internal/bench/rlqsload
//	go test -tags rlqsbench -run TestRLQSMemory -count=1 -v ./internal/bench/rlqsload
//
// Both use internal/envoytest (Envoy, installed on first use, the binary
// and the upstream).
package rlqsload
