package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/dynalimit/dynalimit/internal/degrade"
	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
)

// slot is the resolution of a replica's write counts (the doubling point).
const slot = 100 * time.Millisecond

// heartbeat is how often a replica beats the fleet record: the binary's
// interval.
const heartbeat = 5 * time.Second

// replica is one replica of the fleet: the real store, behind the real
// degraded mode when the scenario asks.
type replica struct {
	n      int
	store  *dynamo.Store
	local  *degrade.Store
	stop   context.CancelFunc // its demand and its repayments
	wg     sync.WaitGroup     // its callers and decisions in flight
	writes []atomic.Int64     // its conditional writes by slot
}

// acquire decides plan on the replica.
func (r *replica) acquire(ctx context.Context, p *cascade.Plan) (cascade.Decision, error) {
	if r.local != nil {
		return r.local.Acquire(ctx, p)
	}
	return r.store.Acquire(ctx, p)
}

// observer hears one replica's store.
type observer struct {
	r   *replica
	run *run
}

func (o observer) ShardDoubled() {
	t := o.run.since()
	i := int(t / slot)
	var w int64
	for j := max(0, i-int(time.Second/slot)+1); j <= i && j < len(o.r.writes); j++ {
		w += o.r.writes[j].Load()
	}
	o.run.st.doublings.Add(1)
	o.run.st.mu.Lock()
	o.run.st.doubled = append(o.run.st.doubled, doubling{at: t, replica: o.r.n, writes: w})
	o.run.st.mu.Unlock()
}
func (o observer) ShardMerged()       {}
func (o observer) RejectionCacheHit() { o.run.st.cacheHits.Add(1) }
func (o observer) Contended(why string) {
	o.run.st.mu.Lock()
	if o.run.st.contended == nil {
		o.run.st.contended = map[string]int{}
	}
	o.run.st.contended[why]++
	o.run.st.mu.Unlock()
}
func (o observer) Batched(_, _ int) {
	t := o.run.since()
	o.run.st.sec(t).writes.Add(1)
	if i := int(t / slot); i < len(o.r.writes) {
		o.r.writes[i].Add(1)
	}
}
func (o observer) ClockBehind(time.Duration) {}
func (o observer) GaveBack(string)           {}
func (o observer) GiveBacksPending(int)      {}

// startReplica opens replica n on the run's table and starts its demand.
func (r *run) startReplica(ctx context.Context, n int) (*replica, error) {
	rep := &replica{n: n, writes: make([]atomic.Int64, int(r.sc.Duration/slot)+1)}
	cfg := dynamo.Config{Table: table, Timeout: r.sc.Timeout, ShardWriteRate: r.sc.ShardWriteRate, ThrottleFails: r.sc.Degrade}
	log := logrus.New()
	log.SetLevel(logrus.ErrorLevel)
	s, err := dynamo.NewStore(ctx, r.fake, cfg, dynamo.WithObserver(observer{rep, r}), dynamo.WithLogger(logrus.NewEntry(log)))
	if err != nil {
		return nil, fmt.Errorf("replica %d: %w", n, err)
	}
	rep.store = s
	dctx, stop := context.WithCancel(ctx)
	rep.stop = stop
	// Every replica beats the fleet record, as the binary's does: its rank
	// there spreads the homes of hot shards (pkg/dynamo).
	fleet := degrade.NewFleet(0)
	rep.wg.Go(func() { _ = fleet.Beat(dctx, s, heartbeat, logrus.NewEntry(log)) })
	if r.sc.Degrade {
		rep.local = degrade.New(s, degrade.Config{ID: fmt.Sprintf("r%d", n), Share: r.live, Log: logrus.NewEntry(log)})
		rep.wg.Go(func() { _ = rep.local.Run(dctx) })
	}
	rep.wg.Go(func() { r.demand(dctx, rep) })
	return rep, nil
}

// close stops r's demand, waits for its decisions and closes its store.
func (r *replica) close() {
	r.stop()
	r.wg.Wait()
	_ = r.store.Close()
}

// fakeFor is the fake DynamoDB of sc: an on-demand table with DynamoDB's
// latencies, conflicts and per-partition throughput.
func fakeFor(sc Scenario) *dynamotest.Fake {
	o := dynamotest.LikeDynamoDB()
	if sc.Latency != (dynamotest.Latency{}) {
		o.Latency = sc.Latency
	}
	p := dynamotest.OnDemand()
	o.Partitions = &p
	f := dynamotest.NewFake()
	f.SetOptions(o)
	return f
}
