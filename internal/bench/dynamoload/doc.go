// Package dynamoload is the DynamoDB load benchmark (make bench-dynamo):
// decisions per second of one ratelimit replica on DynamoDB Local, driven
// over gRPC (ShouldRateLimit) by concurrent callers from grpc-go clients
// on several connections, with the caller count stepped up so that the
// tables show where DynamoDB Local, not the callers, is the limit.
//
// It starts DynamoDB Local with internal/dynamotest and, for each
// scenario, a table of its own and one ratelimit binary on it
// (internal/envoytest: BACKEND_TYPE=dynamodb, BACKEND_TIMEOUT=1s,
// ON_UNAVAILABLE=block, the rules of testdata/config). Before each
// scenario but the first it restarts DynamoDB Local (Local.Restart, same
// process arguments and port): its CPU per write grows with the writes it
// has taken, even on tables since dropped, so scenarios run on one
// instance would not compare. Scenarios:
//
//   - hot: every call the same descriptor value, one bucket item, under a
//     limit that never refuses;
//   - many: KEYS distinct values cycled in order, KEYS items, each decided
//     once (admitted) by 32 callers before the measured runs, as on a
//     replica that has been serving them;
//   - hot-tuned, many-tuned: the same with the settings that can be tuned
//     for them (CONFIG_CACHE_TTL=1h; the rejection cache stays at its
//     100,000 entries; batching has no setting);
//   - refuse: one item of 10 a second driven far past it, with the
//     rejection cache (the default), and refuse-nocache without it
//     (REJECTION_CACHE_SIZE=0).
//
// Before a one-item scenario, 32 callers drive DynamoDB Local for 5 s on
// items no scenario uses, so that its JVM has compiled its paths (the
// priming of a many-item scenario does that too). Each number of callers
// then runs WARMUP, then DURATION measured. Per run it reports decisions/s, p50 and p99 latency, errors, the CPU per decision
// of the service, of DynamoDB Local (its JVM, /proc/PID/stat) and of this
// test process (the callers), the cores DynamoDB Local and the rest of the
// machine kept busy, DynamoDB calls and UpdateItem writes per decision,
// the mean decisions carried by one conditional write (the
// ratelimit_dynamodb_batch_decisions histogram), the mean UpdateItem
// latency, and the refusals the rejection cache answered, from the
// service's /metrics on its debug port. One Markdown table per scenario.
//
// Errors are calls answered with a gRPC status other than OK and answers
// decided by ON_UNAVAILABLE (ratelimit_on_unavailable_total); they are
// never counted as decisions. "busy" counts refusals because the
// decision's own item was too busy within BACKEND_TIMEOUT
// (ratelimit_dynamodb_contended_total): in the scenarios whose limit never
// refuses they are not counted as decisions either; an OVER_LIMIT answer
// there that neither explains fails the benchmark.
//
// The benchmark is a test behind the dynamobench build tag, so that `go
// test ./...` does not run it:
//
//	go test -tags dynamobench -run '^TestDynamoLoad$' -count=1 -v -timeout 30m ./internal/bench/dynamoload
//
// Knobs (environment): DURATION (measured time per run, default 6s),
// WARMUP (default 2s), CALLERS (default 16,64,256), KEYS (default 10000),
// CONNS (most gRPC connections, default 8), SCENARIOS (default
// hot,hot-tuned,many,many-tuned,refuse,refuse-nocache), BENCH_OUT (a file
// that receives the tables too), PROFILE (a directory that receives a CPU
// profile of the service per measured run, <scenario>-<callers>.pprof,
// with DEBUG_PPROF=true). Without the tag the package builds only
// the report's unit test.
package dynamoload
