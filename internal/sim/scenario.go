package main

import (
	"time"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
)

// Scenario is one simulated run: a fleet, its demand, what befalls
// DynamoDB.
type Scenario struct {
	// Name names it (-scenario).
	Name string
	// About says what it shows, for the report.
	About string
	// Replicas at the start.
	Replicas int
	// Tenants: one bucket each, of Limit a second and a burst of Burst;
	// demand over them is Zipf with exponent Zipf (0: uniform).
	Tenants int
	Zipf    float64
	// Limit and Burst of each tenant's bucket, in tokens (a decision takes
	// one); Burst 0 is a second's worth.
	Limit, Burst float64
	// Demand is the fleet's open-loop arrivals a second, spread evenly over
	// the replicas live at the time; zero when Callers drive it.
	Demand float64
	// Callers per replica, closed loop: each asks, waits for the answer,
	// then Pause, and asks again.
	Callers int
	Pause   time.Duration
	// Duration of the run; Window of each row of the report.
	Duration, Window time.Duration
	// Settle is when the bounds start to apply.
	Settle time.Duration
	// Timeout is the store's budget of a decision (BACKEND_TIMEOUT).
	Timeout time.Duration
	// ShardWriteRate is the store's Config.ShardWriteRate (0: its default).
	ShardWriteRate float64
	// Degrade puts each replica behind internal/degrade (ON_UNAVAILABLE=local).
	Degrade bool
	// Latency of DynamoDB's calls (zero: LikeDynamoDB's 5 ms / 20 ms).
	Latency dynamotest.Latency
	// WarmWrites and WarmReads pre-warm the table: CreateTable's
	// WarmThroughput, in write and read units a second (zero: a new
	// on-demand table's 4,000 and 12,000).
	WarmWrites, WarmReads float64
	// Changes add and remove replicas during the run.
	Changes []Change
	// Bursts multiply the demand for a while.
	Bursts []Burst
	// Shards pre-shards the first tenant's bucket (admin SetShards) before
	// the run starts (0: one shard, as a new bucket).
	Shards int
	// Throttle throttles the partition of the first tenant's shard 0.
	Throttle *Window
	// Outage makes every DynamoDB call fail.
	Outage *Window
}

// Change adds Join replicas and then removes Leave, the oldest first, at
// At: scaled down (-scale_replicas), a change of one joining and ten
// leaving becomes one and one, and the one leaving must not be the one
// that just joined, or no replica that ran the bucket before would leave.
type Change struct {
	At          time.Duration
	Join, Leave int
}

// Burst multiplies the demand by Factor from At for For.
type Burst struct {
	At, For time.Duration
	Factor  float64
}

// Window is a span of the run.
type Window struct {
	At, For time.Duration
}

// in says whether t (since the start) lies in w.
func (w *Window) in(t time.Duration) bool {
	return w != nil && t >= w.At && t < w.At+w.For
}

// scaled returns sc with its demand, limits and warm throughput times f, and its
// replicas times f when replicas is set (at least one each).
func (sc Scenario) scaled(f float64, replicas bool) Scenario {
	if f == 1 {
		return sc
	}
	sc.Demand *= f
	sc.Limit *= f
	sc.Burst *= f
	sc.WarmWrites *= f
	sc.WarmReads *= f
	if replicas {
		sc.Replicas = max(1, int(float64(sc.Replicas)*f+0.5))
		for i, c := range sc.Changes {
			c.Join = max(min(c.Join, 1), int(float64(c.Join)*f+0.5))
			c.Leave = max(min(c.Leave, 1), int(float64(c.Leave)*f+0.5))
			sc.Changes[i] = c
		}
	}
	return sc
}
