package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/admin"
	"github.com/dynalimit/dynalimit/pkg/dynamo/item"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// table is the simulated table's name.
const table = "dynalimit"

// tick is how often a replica's open-loop arrivals are started.
const tick = time.Millisecond

// run is one scenario running in a synctest bubble.
type run struct {
	sc    Scenario
	fake  *dynamotest.Fake
	st    *stats
	start time.Time
	plans []*cascade.Plan // by tenant
	cdf   []float64       // Zipf's cumulative distribution over tenants

	mu   sync.Mutex
	reps []*replica // live, oldest first
	next int        // the next replica's number
}

// since is the simulated time since the run started.
func (r *run) since() time.Duration { return time.Since(r.start) }

// live is the number of live replicas.
func (r *run) live() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.reps)
}

// newRun prepares sc: its table, its tenants' plans and its demand's
// distribution.
func newRun(ctx context.Context, sc Scenario) (*run, error) {
	if sc.Timeout == 0 {
		sc.Timeout = 50 * time.Millisecond
	}
	if sc.Burst == 0 {
		sc.Burst = sc.Limit
	}
	if sc.Window == 0 {
		sc.Window = 10 * time.Second
	}
	r := &run{sc: sc, fake: fakeFor(sc), st: newStats(sc)}
	if err := admin.CreateTable(ctx, warmAPI{r.fake, sc.WarmWrites, sc.WarmReads}, table); err != nil {
		return nil, err
	}
	lim, err := tokenbucket.NewLimit(tokenbucket.Millitokens(sc.Burst*float64(tokenbucket.PerToken)),
		tokenbucket.Millitokens(sc.Limit*float64(tokenbucket.PerToken)), time.Second)
	if err != nil {
		return nil, err
	}
	for i := range sc.Tenants {
		key := cascade.Key{Entity: fmt.Sprintf("t%d", i), Resource: "api"}
		r.plans = append(r.plans, &cascade.Plan{Debits: []cascade.Debit{{Key: key, Limit: "rps", Bucket: lim, Amount: tokenbucket.PerToken}}})
	}
	r.cdf = zipfCDF(sc.Tenants, sc.Zipf)
	if sc.Shards > 1 {
		if err := r.preShard(ctx, lim); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// preShard shards the first tenant's bucket into Scenario.Shards, through
// a store of its own.
func (r *run) preShard(ctx context.Context, lim tokenbucket.Limit) error {
	s, err := dynamo.NewStore(ctx, r.fake, dynamo.Config{Table: table, Timeout: time.Second})
	if err != nil {
		return err
	}
	defer func() { _ = s.Close() }()
	return admin.New(s).SetShards(ctx, r.plans[0].Debits[0].Key, r.sc.Shards, map[string]tokenbucket.Limit{"rps": lim})
}

// zipfCDF is the cumulative distribution of Zipf's law with exponent s over
// n ranks.
func zipfCDF(n int, s float64) []float64 {
	cdf := make([]float64, n)
	sum := 0.0
	for i := range n {
		sum += 1 / math.Pow(float64(i+1), s)
		cdf[i] = sum
	}
	for i := range cdf {
		cdf[i] /= sum
	}
	return cdf
}

// tenantDemand is the share of the demand that tenant i gets.
func (r *run) tenantDemand(i int) float64 {
	if i == 0 {
		return r.cdf[0]
	}
	return r.cdf[i] - r.cdf[i-1]
}

// pick draws a tenant by the demand's distribution.
func (r *run) pick(rng *rand.Rand) int {
	if len(r.cdf) == 1 {
		return 0
	}
	u := rng.Float64()
	lo, hi := 0, len(r.cdf)-1
	for lo < hi {
		m := (lo + hi) / 2
		if r.cdf[m] < u {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// factor is the demand's multiplier at t.
func (r *run) factor(t time.Duration) float64 {
	f := 1.0
	for _, b := range r.sc.Bursts {
		if t >= b.At && t < b.At+b.For {
			f *= b.Factor
		}
	}
	return f
}

// demand drives rep until ctx ends: Callers closed-loop callers, or
// open-loop arrivals at its share of the fleet's Demand.
func (r *run) demand(ctx context.Context, rep *replica) {
	rng := rand.New(rand.NewPCG(uint64(rep.n), 7))
	if r.sc.Callers > 0 {
		for c := range r.sc.Callers {
			crng := rand.New(rand.NewPCG(uint64(rep.n), uint64(c)))
			rep.wg.Go(func() {
				for ctx.Err() == nil {
					r.decide(rep, r.pick(crng))
					sleep(ctx, r.sc.Pause)
				}
			})
		}
		return
	}
	carry := 0.0
	for ctx.Err() == nil {
		t := r.since()
		carry += r.sc.Demand * r.factor(t) / float64(max(r.live(), 1)) * tick.Seconds()
		for ; carry >= 1; carry-- {
			tenant := r.pick(rng)
			rep.wg.Go(func() { r.decide(rep, tenant) })
		}
		sleep(ctx, tick)
	}
}

// decide asks rep to decide one request of tenant, and counts it.
func (r *run) decide(rep *replica, tenant int) {
	t := r.since()
	dec, err := rep.acquire(context.Background(), r.plans[tenant])
	lat := r.since() - t
	r.st.decided(t, tenant, r.sc.Settle, err == nil && dec.Admitted, dec.Local, err != nil, lat)
	if err != nil {
		r.st.failedFor(errReason(err), rep.n, t+lat)
	}
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// errGone is DynamoDB not answering (Scenario.Outage).
var errGone = errors.New("dial tcp 127.0.0.1:8000: connect: connection refused")

// simulate runs sc in the calling goroutine, which must be in a synctest
// bubble (its clock starts at the bubble's), and returns its counts.
func simulate(sc Scenario) (*run, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r, err := newRun(ctx, sc)
	if err != nil {
		return nil, err
	}
	r.start = time.Now()
	if sc.Outage != nil {
		r.fake.SetFail(func(context.Context, string) error {
			if sc.Outage.in(r.since()) {
				return errGone
			}
			return nil
		})
	}
	for range sc.Replicas {
		if err := r.add(ctx); err != nil {
			return nil, err
		}
	}
	var bg sync.WaitGroup
	bg.Go(func() { r.events(ctx) })
	bg.Go(func() { r.sample(ctx) })
	sleep(ctx, sc.Duration)
	cancel()
	bg.Wait()
	r.mu.Lock()
	reps := r.reps
	r.reps = nil
	r.mu.Unlock()
	for _, rep := range reps {
		rep.close()
	}
	return r, nil
}

// add starts one more replica.
func (r *run) add(ctx context.Context) error {
	r.mu.Lock()
	n := r.next
	r.next++
	r.mu.Unlock()
	rep, err := r.startReplica(ctx, n)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.reps = append(r.reps, rep)
	r.mu.Unlock()
	return nil
}

// events applies the scenario's changes and its throttle, each at its time.
func (r *run) events(ctx context.Context) {
	type event struct {
		at time.Duration
		do func()
	}
	var evs []event
	for _, c := range r.sc.Changes {
		evs = append(evs, event{c.At, func() {
			for range c.Join {
				_ = r.add(ctx)
			}
			r.mu.Lock()
			n := min(c.Leave, len(r.reps))
			gone := r.reps[:n]
			r.reps = append([]*replica(nil), r.reps[n:]...)
			r.mu.Unlock()
			for _, rep := range gone {
				rep.close()
			}
		}})
	}
	if w := r.sc.Throttle; w != nil {
		evs = append(evs, event{w.At, func() { r.fake.ThrottlePartition(table, r.shardPK(0), w.For) }})
	}
	for _, ev := range evs {
		sleep(ctx, ev.at-r.since())
		if ctx.Err() != nil {
			return
		}
		ev.do()
	}
}

// shardPK is the partition key of shard n of the first tenant's bucket.
func (r *run) shardPK(n int) string {
	return fmt.Sprintf("n%s/BUCKET#t0#api#%d", "default", n)
}

// sample records, at the end of each second, the units billed, the
// throttles, the first tenant's shards and the table's partitions.
func (r *run) sample(ctx context.Context) {
	var last dynamotest.Capacity
	for i := 0; ; i++ {
		sleep(ctx, time.Duration(i+1)*time.Second-r.since())
		if ctx.Err() != nil {
			return
		}
		c := r.fake.Consumed()
		s := &r.st.secs[min(i, len(r.st.secs)-1)]
		s.wcu, s.rcu, s.throttled = c.WriteUnits-last.WriteUnits, c.ReadUnits-last.ReadUnits, c.Throttled-last.Throttled
		last = c
		parts, _ := r.fake.Partitions(table)
		s.partitions = len(parts)
		s.shards, s.held = r.tenantBucket()
	}
}

// tenantBucket returns the first tenant's bucket now: its shards, less
// those a merge removed and those a doubling created and has not admitted
// (pending), and the whole tokens they hold. It reads its shards' items one
// by one (they are numbered from 0 with no gap: a merge marks a shard and
// keeps it), not the whole table.
func (r *run) tenantBucket() (shards int, held int64) {
	now := time.Now().UnixMilli()
	for n := 0; ; n++ {
		it := r.fake.Item(table, r.shardPK(n), item.SKState)
		if it == nil {
			return shards, held
		}
		img, err := item.Decode(it)
		if err != nil || img.Merged || img.Pending {
			continue
		}
		shards++
		for _, l := range img.Limits {
			held += l.Shape.Available(tokenbucket.State{X: l.Level}, now)
		}
	}
}
