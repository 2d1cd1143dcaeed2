// Package redisclient measures the two Redis client libraries the Redis
// store could be built on, rueidis and go-redis v9, on the store's hot path:
// one EVALSHA of a rate-limit script per decision, its keys sharing one hash
// tag.
//
// The package is a Go module of its own so that the service's module never
// depends on the library that lost; BENCHMARKS.md (section "Redis client:
// rueidis against go-redis v9") holds the figures and the choice. Its tests
// carry the build tag redisbench and start their own redis-server on a free
// port (with no persistence), and stop it when they end:
//
//	cd internal/bench/redisclient
//	go test -tags redisbench -run '^TestRedisClients$' -count=1 -v -timeout 60m
//
// (or make bench-redis-client from the repository's root). ROUNDS, DURATION,
// CONC, KEYS and CLIENTS in the environment narrow or widen the run; the
// Go benchmarks (BenchmarkEvalsha) give ns/op and allocs/op for the same calls.
package redisclient
