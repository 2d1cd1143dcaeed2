package main

import (
	"time"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
)

// localLatency is DynamoDB Local's, as measured beside the fleet tests:
// writes answered in 1.6–3.6 ms when nothing queued (BENCHMARKS.md, "What
// real DynamoDB would give").
var localLatency = dynamotest.Latency{
	Read:  dynamotest.Dist{P50: 2500 * time.Microsecond, P99: 4 * time.Millisecond},
	Write: dynamotest.Dist{P50: 2500 * time.Microsecond, P99: 4 * time.Millisecond},
}

// calibHotItem is TestFleetHotBucket (cmd/ratelimit): three replicas, 90
// callers, one bucket of 10/s with a burst of 100, 10 s,
// BACKEND_TIMEOUT=200ms. Measured: 199 admitted of a bound of 200, 309
// UpdateItem in all over 150,607 decisions. Each caller's pause is the
// gRPC round trip of that run (90 callers made 15,061 decisions a second:
// 6 ms a call).
var calibHotItem = Scenario{
	About:    "TestFleetHotBucket: 3 replicas × 30 callers, one bucket of 10/s burst 100, 10 s, 200 ms budget, DynamoDB Local's latency",
	Replicas: 3, Tenants: 1, Limit: 10, Burst: 100, Callers: 30, Pause: 6 * time.Millisecond,
	Duration: 10 * time.Second, Window: time.Second, Timeout: 200 * time.Millisecond, Latency: localLatency,
}

// calibDoubling is TestDoublingOnRate (pkg/dynamo) over time: two
// replicas write one bucket at a rate that grows by 10 writes a second
// each second, ShardWriteRate 100. Measured there: the doubling starts at
// the 100th write of a replica's window, once, whoever else doubles.
var calibDoubling = Scenario{
	About:    "TestDoublingOnRate over time: 2 replicas, demand ramping 10/s a second each, ShardWriteRate 100",
	Replicas: 2, Tenants: 1, Limit: 1_000_000, Demand: 2, ShardWriteRate: 100,
	Duration: 20 * time.Second, Window: time.Second, Timeout: 200 * time.Millisecond,
	Latency: dynamotest.Latency{Read: dynamotest.Dist{P50: time.Millisecond}, Write: dynamotest.Dist{P50: time.Millisecond}},
	Bursts:  ramp(20, 10),
}

// ramp is a demand of step decisions a second more each second, for n
// seconds (Burst factors over a Demand of one).
func ramp(n int, step float64) []Burst {
	out := make([]Burst, n)
	for i := range out {
		out[i] = Burst{At: time.Duration(i) * time.Second, For: time.Second, Factor: step * float64(i+1)}
	}
	return out
}

// calibOutage is TestOutageThreeModes (cmd/ratelimit), ON_UNAVAILABLE=local:
// three replicas, 30 callers each on one key of 20/s (burst 20), 24 s,
// BACKEND_TIMEOUT=100ms, DynamoDB gone from 6 s for 10 s. Measured: 198
// admitted of the 199 allowed in the outage, 407 of 500 over the run, 165,853
// asked in the outage (90 callers at 5.4 ms a call).
var calibOutage = Scenario{
	About:    "TestOutageThreeModes, local: 3 replicas × 30 callers, one key of 20/s, 24 s, 100 ms budget, DynamoDB gone for 10 s at 6 s",
	Replicas: 3, Tenants: 1, Limit: 20, Burst: 20, Callers: 30, Pause: 5400 * time.Microsecond, Degrade: true,
	Duration: 24 * time.Second, Window: time.Second, Timeout: 100 * time.Millisecond, Latency: localLatency,
	Outage: &Window{At: 6 * time.Second, For: 10 * time.Second},
}
