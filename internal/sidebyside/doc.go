// Package sidebyside checks the ratelimit binary against answers recorded
// from envoyproxy/ratelimit itself (commit f2fb157, on Redis), request by
// request: overall and per-descriptor codes, limits and remaining counts,
// RateLimit-* headers, dynamic metadata, the Prometheus series at
// PROMETHEUS_ADDR, and whether GRPC_UDS replaces the TCP listener.
//
// The scenarios (scenario.go) are the single source of what is asked; the
// recorder (./record, run where the old binary can be built, with an
// in-process Redis) writes testdata/recorded.json, and the test replays the
// same scenarios against this repository's binary and compares. Where the
// two differ by design (all-or-nothing requests against counters that
// count refused requests too), a step says so and what this service
// answers instead; every other field must be equal.
package sidebyside
