package dynamotest

import (
	"context"
	"math"
	"math/rand/v2"
	"time"
)

// Options say what of DynamoDB a Fake models beyond its answers. The zero
// Options, a new Fake's, model none of it: every call answers at once, in
// the order calls take the Fake's lock, with no conflicts and no limit.
type Options struct {
	// Latency, when set, delays every data call by a draw of its
	// distribution. A call takes effect after half its draw and answers
	// after the whole: a call whose context ends in the first half has no
	// effect, one whose context ends in the second took effect and answers
	// the context's error.
	Latency Latency
	// Conflicts turns on DynamoDB's transaction conflicts, over the time a
	// TransactWriteItems is in flight (see TransactWriteItems).
	Conflicts bool
	// Throughput, when set, limits what each partition takes a second;
	// past it a call is throttled.
	Throughput Throughput
	// Partitions, when set, hashes each table's partition keys to
	// partitions that share Throughput, split and isolate hot items (see
	// Partitioning); nil gives each partition key a partition of its own.
	Partitions *Partitioning
	// Sleep waits d, or until ctx is done (then it returns ctx's error).
	// Nil waits on a timer, which under testing/synctest is the bubble's
	// clock. The throughput buckets read time.Now.
	Sleep func(ctx context.Context, d time.Duration) error
	// Seed seeds the latency draws; zero is seed 1.
	Seed uint64
}

// Latency is how long calls take, one draw a call: Read for GetItem,
// BatchGetItem, Query and Scan; Write for PutItem, UpdateItem, DeleteItem
// and BatchWriteItem. A TransactWriteItems draws Write twice, once for its
// prepare round and once for its commit round: about twice a write, as on
// DynamoDB. The control plane (CreateTable, DescribeTable,
// UpdateTimeToLive) answers at once.
type Latency struct {
	Read, Write Dist
}

// Dist is a log-normal distribution of durations given by its median P50
// and its 99th percentile P99. A P99 not above P50 makes every draw P50; a
// zero P50 makes every draw zero.
type Dist struct {
	P50, P99 time.Duration
}

// Throughput is what one partition (here: the items of one partition key
// of a table) takes a second, each a token bucket that starts full and
// holds one second's worth (DynamoDB's burst). A write costs its write units
// (one a started KB of the larger of the item's old and new images; twice
// that in a transaction); a read costs one unit a started 4 KB when
// strongly consistent, half when eventually consistent. Zero is no limit.
type Throughput struct {
	WriteUnits, ReadUnits float64
}

// LikeDynamoDB returns Options modelling all of DynamoDB's behaviour the
// Fake knows, at DynamoDB's documented figures: latencies of 5 ms at the
// median and 20 ms at the 99th percentile for reads and writes, transaction
// conflicts, and 1,000 write units and 3,000 read units a second per
// partition.
func LikeDynamoDB() Options {
	d := Dist{P50: 5 * time.Millisecond, P99: 20 * time.Millisecond}
	return Options{
		Latency:    Latency{Read: d, Write: d},
		Conflicts:  true,
		Throughput: Throughput{WriteUnits: 1000, ReadUnits: 3000},
	}
}

// SetOptions sets what of DynamoDB f models from now on, and empties its
// throughput buckets (full again). Set it before calls run: a transaction
// in flight when conflicts are turned off still finishes as one.
func (f *Fake) SetOptions(o Options) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.model = o
	seed := o.Seed
	if seed == 0 {
		seed = 1
	}
	f.rng = rand.New(rand.NewPCG(seed, seed))
	if f.pending == nil {
		f.pending = map[string]*txn{}
	}
	f.buckets = map[string]*bucket{}
	f.layouts = nil
}

// z99 is the standard normal's 99th percentile.
const z99 = 2.3263478740408408

// draw returns a draw of d from r.
func (d Dist) draw(r *rand.Rand) time.Duration {
	if d.P50 <= 0 {
		return 0
	}
	if d.P99 <= d.P50 {
		return d.P50
	}
	sigma := math.Log(float64(d.P99)/float64(d.P50)) / z99
	return time.Duration(float64(d.P50) * math.Exp(sigma*r.NormFloat64()))
}

// callKind is what a call does: read, write or neither.
type callKind int

const (
	readCall callKind = iota
	writeCall
)

// latency draws the latency of a call of kind k.
func (f *Fake) latency(k callKind) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	d := f.model.Latency.Read
	if k == writeCall {
		d = f.model.Latency.Write
	}
	if d.P50 <= 0 {
		return 0
	}
	return d.draw(f.rng)
}

// wait waits d through Options.Sleep, then out any freeze (Freeze); a d
// not above zero waits only for the freeze.
func (f *Fake) wait(ctx context.Context, d time.Duration) error {
	if d > 0 {
		if err := f.sleep(ctx, d); err != nil {
			return err
		}
	}
	return f.thaw(ctx)
}

// sleep waits d through Options.Sleep.
func (f *Fake) sleep(ctx context.Context, d time.Duration) error {
	f.mu.Lock()
	sleep := f.model.Sleep
	f.mu.Unlock()
	if sleep == nil {
		sleep = timerSleep
	}
	return sleep(ctx, d)
}

// Freeze makes f answer no call for d from now, as a DynamoDB whose
// process is stopped (SIGSTOP): a call sent meanwhile waits until the
// freeze ends before it runs, one in flight waits before it answers, and
// a call whose context ends first returns the context's error. A freeze
// during a freeze lasts until the later end.
func (f *Fake) Freeze(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if end := time.Now().Add(d); end.After(f.thawAt) {
		f.thawAt = end
	}
}

// thaw waits until no freeze holds f, or ctx is done.
func (f *Fake) thaw(ctx context.Context) error {
	for {
		f.mu.Lock()
		left := time.Until(f.thawAt)
		f.mu.Unlock()
		if left <= 0 {
			return nil
		}
		if err := f.sleep(ctx, left); err != nil {
			return err
		}
	}
}

// timerSleep waits d on a timer, or until ctx is done.
func timerSleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// call runs body under f's lock as a call of kind k takes effect: half the
// call's latency after it is sent; it answers the other half later.
func (f *Fake) call(ctx context.Context, k callKind, body func() error) error {
	d := f.latency(k)
	if err := f.wait(ctx, d/2); err != nil {
		return err
	}
	err := f.locked(body)
	if werr := f.wait(ctx, d-d/2); werr != nil {
		if err == nil && k == writeCall {
			_ = f.locked(func() error { f.used.Unanswered++; return nil })
		}
		return werr
	}
	return err
}

// locked runs body under f's lock.
func (f *Fake) locked(body func() error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return body()
}
