// Command trivialrls is the baseline of the gRPC load benchmark: an
// envoy.service.ratelimit.v3 RateLimitService whose ShouldRateLimit answers
// OVERALL_CODE OK at once, without looking at the request.
//
// It is built with the same grpc-go version and the same server defaults as
// the ratelimit binary (grpc.NewServer with no tuning, the health service and
// reflection registered), so that ghz driving both in one run measures what
// the decision path costs on top of gRPC itself. internal/bench/grpc.sh
// (make bench-grpc) starts it; see BENCHMARKS.md.
//
// Usage:
//
//	trivialrls -addr 127.0.0.1:0
//	trivialrls -protoset rls.protoset
//
// The second form writes the RateLimitService's descriptors (a
// FileDescriptorSet of envoy/service/ratelimit/v3/rls.proto and its
// imports) and exits: ghz reads it with --protoset to call servers that do
// not register reflection, such as envoyproxy/ratelimit.
//
// It prints "listening on ADDR" once bound, reports SERVING on grpc.health,
// and stops gracefully (bounded by a two-second deadline) on SIGINT or
// SIGTERM. The handler keeps no state and is safe for concurrent use.
package main
