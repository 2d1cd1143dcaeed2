package memstore

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/dynalimit/dynalimit/internal/storetest"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// Store satisfies the store contract (the same method set as
// internal/service.Store, which the suite mirrors).
var _ storetest.Store = (*Store)(nil)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, c *storetest.Clock) storetest.Store {
		return New(WithClock(c.Now))
	})
}

func TestConformanceOneShard(t *testing.T) {
	storetest.Run(t, func(t *testing.T, c *storetest.Clock) storetest.Store {
		return New(WithClock(c.Now), WithShards(1))
	})
}

func TestConcurrency(t *testing.T) {
	storetest.RunConcurrency(t, func(t *testing.T) []storetest.Store {
		return []storetest.Store{New()}
	})
}

// l3 holds 3 tokens and refills 3 mt/ms; slow holds 3 tokens and refills
// them over a minute.
var (
	l3   = tokenbucket.Limit{Capacity: 3000, RefillAmount: 3000, RefillPeriod: time.Second}
	slow = tokenbucket.Limit{Capacity: 3000, RefillAmount: 3000, RefillPeriod: time.Minute}
)

func debit(entity string, l tokenbucket.Limit, op cascade.Op, n tokenbucket.Millitokens) cascade.Debit {
	return cascade.Debit{
		Key:    cascade.Key{Namespace: "default", Entity: entity, Resource: "api"},
		Limit:  "rpm",
		Bucket: l,
		Amount: n,
		Op:     op,
	}
}

func acquire(t *testing.T, s *Store, ds ...cascade.Debit) (cascade.Decision, error) {
	t.Helper()
	return s.Acquire(context.Background(), &cascade.Plan{Debits: ds})
}

// mustAcquire fails the test on error and returns the decision.
func mustAcquire(t *testing.T, s *Store, ds ...cascade.Debit) cascade.Decision {
	t.Helper()
	dec, err := acquire(t, s, ds...)
	if err != nil {
		t.Fatalf("Acquire(%d debits) error = %v, want nil", len(ds), err)
	}
	return dec
}

func remaining(t *testing.T, s *Store, entity string, l tokenbucket.Limit) tokenbucket.Millitokens {
	t.Helper()
	return mustAcquire(t, s, debit(entity, l, cascade.Check, 0)).Statuses[0].Remaining
}

// Equivalent mutant, read by internal/mutants (make mutation); "one shard"
// below pins the boundary it moves:
//
// mutant: CONDITIONALS_BOUNDARY memstore.go `c.shards > 1` one shard rounded up to a power of two is 1<<bits.Len(0) = 1, the same as the default n.
func TestNew(t *testing.T) {
	procs := runtime.GOMAXPROCS(0)
	const defaultBytes, sweep = DefaultMaxBytes, DefaultSweepInterval
	tests := []struct {
		name       string
		opts       []Option
		wantShards int
		wantPer    int
		wantBytes  int64 // per shard
		wantSweep  time.Duration
	}{
		{"default", nil, defaultShards(procs), (DefaultMaxBuckets + defaultShards(procs) - 1) / defaultShards(procs), defaultBytes / int64(defaultShards(procs)), sweep},
		{"five rounds up", []Option{WithShards(5)}, 8, DefaultMaxBuckets / 8, defaultBytes / 8, sweep},
		{"one shard", []Option{WithShards(1)}, 1, DefaultMaxBuckets, defaultBytes, sweep},
		{"zero means one", []Option{WithShards(0)}, 1, DefaultMaxBuckets, defaultBytes, sweep},
		{"negative means one", []Option{WithShards(-3)}, 1, DefaultMaxBuckets, defaultBytes, sweep},
		{"bound over shards", []Option{WithShards(4), WithMaxBuckets(10)}, 4, 3, defaultBytes / 4, sweep},
		{"bound below shards", []Option{WithShards(4), WithMaxBuckets(1)}, 4, 1, defaultBytes / 4, sweep},
		{"zero bound keeps default", []Option{WithShards(1), WithMaxBuckets(0)}, 1, DefaultMaxBuckets, defaultBytes, sweep},
		{"byte bound over shards", []Option{WithShards(4), WithMaxBytes(4096)}, 4, DefaultMaxBuckets / 4, 1024, sweep},
		{"one byte", []Option{WithShards(1), WithMaxBytes(1)}, 1, DefaultMaxBuckets, 1, sweep},
		{"zero byte bound keeps default", []Option{WithShards(1), WithMaxBytes(0)}, 1, DefaultMaxBuckets, defaultBytes, sweep},
		{"negative byte bound keeps default", []Option{WithShards(1), WithMaxBytes(-1)}, 1, DefaultMaxBuckets, defaultBytes, sweep},
		{"sweep interval", []Option{WithShards(1), WithSweepInterval(time.Millisecond)}, 1, DefaultMaxBuckets, defaultBytes, time.Millisecond},
		{"zero sweep interval keeps default", []Option{WithShards(1), WithSweepInterval(0)}, 1, DefaultMaxBuckets, defaultBytes, sweep},
		{"negative sweep interval keeps default", []Option{WithShards(1), WithSweepInterval(-time.Second)}, 1, DefaultMaxBuckets, defaultBytes, sweep},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New(tt.opts...)
			if len(s.shards) != tt.wantShards || s.perShard != tt.wantPer || s.perShardBytes != tt.wantBytes || s.sweepInterval != tt.wantSweep {
				t.Errorf("New(%s) = %d shards of %d buckets and %d bytes, sweep every %v; want %d of %d and %d, every %v",
					tt.name, len(s.shards), s.perShard, s.perShardBytes, s.sweepInterval, tt.wantShards, tt.wantPer, tt.wantBytes, tt.wantSweep)
			}
		})
	}
}

// defaultShards is the least power of two ≥ 4×procs.
func defaultShards(procs int) int {
	n := 1
	for n < 4*procs {
		n *= 2
	}
	return n
}

func TestFullBucketsAreNotStored(t *testing.T) {
	c := storetest.NewClock(storetest.Epoch)
	s := New(WithClock(c.Now))
	mustAcquire(t, s, debit("check", l3, cascade.Check, 0))
	mustAcquire(t, s, debit("too-big", l3, cascade.Consume, 4000))
	mustAcquire(t, s, debit("refund", l3, cascade.Refund, 1000))
	if got := s.Stats().Buckets; got != 0 {
		t.Fatalf("after a check, a refused consume and a refund on new keys, Stats().Buckets = %d, want 0", got)
	}
	mustAcquire(t, s, debit("used", l3, cascade.Consume, 1))
	if got := s.Stats().Buckets; got != 1 {
		t.Fatalf("after consuming from a new key, Stats().Buckets = %d, want 1", got)
	}
}

func TestStatsBytes(t *testing.T) {
	c := storetest.NewClock(storetest.Epoch)
	s := New(WithClock(c.Now))
	mustAcquire(t, s, debit("a", l3, cascade.Consume, 1000))
	// "default" + "a" + "api" + "rpm"
	want := Stats{Buckets: 1, Bytes: entryOverhead + 14}
	if got := s.Stats(); got != want {
		t.Fatalf("Stats() = %+v, want %+v", got, want)
	}
	long := debit(string(make([]byte, 2048)), l3, cascade.Consume, 1000)
	mustAcquire(t, s, long)
	want = Stats{Buckets: 2, Bytes: 2*entryOverhead + 14 + 2048 + 13}
	if got := s.Stats(); got != want {
		t.Fatalf("Stats() = %+v, want %+v", got, want)
	}
	c.Advance(time.Second)
	s.sweep(nil)
	want = Stats{EvictedFull: 2}
	if got := s.Stats(); got != want {
		t.Fatalf("after a sweep with both full again, Stats() = %+v, want %+v", got, want)
	}
}

func TestBound(t *testing.T) {
	c := storetest.NewClock(storetest.Epoch)
	s := New(WithClock(c.Now), WithShards(1), WithMaxBuckets(2))
	mustAcquire(t, s, debit("a", l3, cascade.Consume, 1000))
	mustAcquire(t, s, debit("b", slow, cascade.Consume, 1000))

	// At the bound, nothing full: a new key evicts the bucket nearest to
	// full (a, full again in 334 ms; b needs 20 s) and is decided.
	if dec := mustAcquire(t, s, debit("c", l3, cascade.Consume, 1000)); !dec.Admitted || dec.Statuses[0].Remaining != 2000 {
		t.Fatalf("Acquire(new key at bound) = %+v, want admitted with 2000 remaining", dec)
	}
	if got, want := s.Stats(), (Stats{Buckets: 2, Bytes: 2*entryOverhead + 28, EvictedNotFull: 1, ForgivenMillitokens: 1000}); got != want {
		t.Fatalf("Stats() = %+v, want %+v", got, want)
	}
	// A plan that stores nothing new evicts nothing.
	if dec := mustAcquire(t, s, debit("d", l3, cascade.Check, 0)); !dec.Admitted {
		t.Fatalf("Acquire(check on new key at bound) = %+v, want admitted", dec)
	}
	if got := s.Stats().EvictedNotFull; got != 1 {
		t.Fatalf("after a check on a new key, Stats().EvictedNotFull = %d, want 1", got)
	}
	// c is full again after 334 ms: the insert of a drops it, not b.
	c.Advance(334 * time.Millisecond)
	if dec := mustAcquire(t, s, debit("a", l3, cascade.Consume, 1000)); !dec.Admitted || dec.Statuses[0].Remaining != 2000 {
		t.Fatalf("Acquire(a again, c full again) = %+v, want admitted with 2000 remaining", dec)
	}
	if got, want := s.Stats(), (Stats{Buckets: 2, Bytes: 2*entryOverhead + 28, EvictedFull: 1, EvictedNotFull: 1, ForgivenMillitokens: 1000}); got != want {
		t.Fatalf("Stats() = %+v, want %+v", got, want)
	}
	if got, want := remaining(t, s, "b", slow), tokenbucket.Millitokens(2000+3000*334/60000); got != want {
		t.Fatalf("remaining(b) = %d, want %d (kept)", got, want)
	}
}

// TestBoundKeepsUsedBuckets: the eviction hand spares the buckets decided
// on since it last passed them, and evicts a bucket used once first, even
// one further from full.
func TestBoundKeepsUsedBuckets(t *testing.T) {
	c := storetest.NewClock(storetest.Epoch)
	s := New(WithClock(c.Now), WithShards(1), WithMaxBuckets(2))
	mustAcquire(t, s, debit("hot", l3, cascade.Consume, 1000))
	mustAcquire(t, s, debit("cold", slow, cascade.Consume, 1000))
	mustAcquire(t, s, debit("hot", l3, cascade.Consume, 1000))
	// hot is nearer to full (667 ms) than cold (20 s), but used since.
	mustAcquire(t, s, debit("new", slow, cascade.Consume, 1000))
	if got := remaining(t, s, "hot", l3); got != 1000 {
		t.Fatalf("remaining(hot) = %d, want 1000 (kept)", got)
	}
	if got, want := s.Stats(), (Stats{Buckets: 2, Bytes: 2*entryOverhead + 32, EvictedNotFull: 1, ForgivenMillitokens: 1000}); got != want {
		t.Fatalf("Stats() = %+v, want %+v (cold evicted)", got, want)
	}
}

// TestBoundSparesPlanBuckets: a bucket that the plan itself holds is not
// evicted to make room for the plan's new bucket; when no other can be, the
// new bucket's level is forgotten (an eviction of it) and the plan decided.
func TestBoundSparesPlanBuckets(t *testing.T) {
	c := storetest.NewClock(storetest.Epoch)
	s := New(WithClock(c.Now), WithShards(1), WithMaxBuckets(1))
	mustAcquire(t, s, debit("a", l3, cascade.Consume, 1000))
	c.Advance(time.Second) // a is full again, but still stored
	dec := mustAcquire(t, s, debit("a", l3, cascade.Consume, 1000), debit("b", l3, cascade.Consume, 1000))
	if !dec.Admitted {
		t.Fatalf("Acquire(a, b) with room for one = %+v, want admitted", dec)
	}
	if got, want := s.Stats(), (Stats{Buckets: 1, Bytes: entryOverhead + 14, EvictedFull: 1, EvictedNotFull: 1, ForgivenMillitokens: 1000}); got != want {
		t.Fatalf("Stats() = %+v, want %+v", got, want)
	}
	if got := remaining(t, s, "b", l3); got != 2000 {
		t.Fatalf("remaining(b) = %d, want 2000 (kept)", got)
	}
}

func TestInvalidLimit(t *testing.T) {
	s := New()
	tests := []struct {
		name string
		l    tokenbucket.Limit
	}{
		{"zero", tokenbucket.Limit{}},
		{"no capacity", tokenbucket.Limit{RefillAmount: 1, RefillPeriod: time.Second}},
		{"no refill", tokenbucket.Limit{Capacity: 1, RefillPeriod: time.Second}},
		{"sub-millisecond period", tokenbucket.Limit{Capacity: 1, RefillAmount: 1, RefillPeriod: time.Microsecond}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if dec, err := acquire(t, s, debit("a", tt.l, cascade.Consume, 1)); err == nil {
				t.Errorf("Acquire(limit %+v) = %+v, nil, want an error", tt.l, dec)
			}
		})
	}
}

func TestLargePlans(t *testing.T) {
	for _, n := range []int{inline + 1, largePlan, largePlan + 1, 1000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			c := storetest.NewClock(storetest.Epoch)
			s := New(WithClock(c.Now), WithShards(4))
			var ds []cascade.Debit
			for i := range 2 * n {
				ds = append(ds, debit(fmt.Sprint("e", i%n), l3, cascade.Consume, 1000))
			}
			dec := mustAcquire(t, s, ds...)
			if !dec.Admitted || len(dec.Statuses) != 2*n {
				t.Fatalf("Acquire(%d debits over %d buckets) = admitted %t with %d statuses, want admitted with %d", 2*n, n, dec.Admitted, len(dec.Statuses), 2*n)
			}
			for i, st := range dec.Statuses {
				if st.Remaining != 1000 {
					t.Fatalf("status %d remaining = %d, want 1000", i, st.Remaining)
				}
			}
			if got := s.Stats().Buckets; got != n {
				t.Fatalf("Stats().Buckets = %d, want %d", got, n)
			}
		})
	}
}

func TestNilPlan(t *testing.T) {
	if dec, err := New().Acquire(context.Background(), nil); err == nil {
		t.Fatalf("Acquire(nil) = %+v, nil, want an error", dec)
	}
}

func TestSweeper(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New(WithSweepInterval(10 * time.Second))
		mustAcquire(t, s, debit("fast", l3, cascade.Consume, 1000))
		mustAcquire(t, s, debit("slow", slow, cascade.Consume, 3000))
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- s.Run(ctx) }()

		time.Sleep(10*time.Second + time.Millisecond)
		synctest.Wait()
		if got := s.Stats(); got.Buckets != 1 || got.EvictedFull != 1 {
			t.Fatalf("after one sweep, Stats() = %+v, want 1 bucket and 1 eviction (fast full again)", got)
		}
		// slow kept its state: 10 s of a minute's refill.
		if got := remaining(t, s, "slow", slow); got != 500 {
			t.Fatalf("remaining(slow) = %d, want 500", got)
		}

		time.Sleep(60 * time.Second)
		synctest.Wait()
		if got, want := s.Stats(), (Stats{EvictedFull: 2}); got != want {
			t.Fatalf("after slow refilled and a sweep, Stats() = %+v, want %+v", got, want)
		}

		cancel()
		if err := <-errc; err != nil {
			t.Fatalf("Run() after cancel = %v, want nil", err)
		}
	})
}

func TestRunReturnsWhenContextEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := s.Run(ctx); err != nil {
			t.Fatalf("Run() = %v, want nil", err)
		}
		if got := time.Since(time.Unix(946684800, 0)); got != time.Minute {
			t.Fatalf("Run returned after %v, want 1m", got)
		}
	})
}

// TestNamespace wants a key naming the store's namespace (WithNamespace)
// and a key naming none to be one bucket, in separate plans and within one,
// and a key naming another namespace to be another bucket. The caller's
// plan is not modified.
func TestNamespace(t *testing.T) {
	s := New(WithNamespace("team-a"))
	d := func(ns string) cascade.Debit {
		return cascade.Debit{Key: cascade.Key{Namespace: ns, Entity: "e", Resource: "api"}, Limit: "rpm", Bucket: slow, Amount: tokenbucket.PerToken}
	}
	cases := []struct {
		name      string
		ns        []string
		admitted  bool
		remaining tokenbucket.Millitokens // of the first debit, when admitted
	}{
		{"unnamed", []string{""}, true, 2000},
		{"named the store's", []string{"team-a"}, true, 1000},
		{"both in one plan", []string{"", "team-a"}, false, 0},
		{"another namespace", []string{"team-b"}, true, 2000},
		{"the store's, last token", []string{"team-a"}, true, 0},
	}
	for _, c := range cases {
		p := &cascade.Plan{}
		for _, ns := range c.ns {
			p.Debits = append(p.Debits, d(ns))
		}
		dec, err := s.Acquire(context.Background(), p)
		if err != nil {
			t.Fatalf("%s: Acquire() = %v", c.name, err)
		}
		if dec.Admitted != c.admitted || c.admitted && dec.Statuses[0].Remaining != c.remaining {
			t.Errorf("%s: Acquire(%v) = admitted %t, remaining %d; want %t, %d", c.name, c.ns, dec.Admitted, dec.Statuses[0].Remaining, c.admitted, c.remaining)
		}
		for i, ns := range c.ns {
			if got := p.Debits[i].Key.Namespace; got != ns {
				t.Errorf("%s: Acquire() changed the caller's debit %d namespace to %q, want %q", c.name, i, got, ns)
			}
		}
	}
}
