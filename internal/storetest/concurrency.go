package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// Concurrency parameters. The hot-bucket test runs hotGoroutines goroutines
// for hotDuration against one bucket of hotLimit.
const (
	hotGoroutines  = 50
	hotDuration    = 2 * time.Second
	lockGoroutines = 16
	lockPlans      = 300
	deadlockAfter  = 60 * time.Second
)

var (
	// hotLimit holds 100 tokens and refills 100 tokens every 200 ms.
	hotLimit = limit(100*tok, 100*tok, 200*ms)
	// frozenLimit holds 2000 tokens and refills one millitoken a day: no
	// refill during a test, so tokens are conserved exactly.
	frozenLimit = limit(2000*tok, 1, 24*time.Hour)
)

// RunConcurrency runs the concurrency tests on the real clock. f returns one
// or more store instances that share one fresh, empty state (one instance
// for the embedded store; several clients of one new table for DynamoDB);
// goroutines are spread across them. f is called once per subtest.
// WithMaxCalls bounds the plans of overlapping_plans (4,800 otherwise).
func RunConcurrency(t *testing.T, f func(t *testing.T) []Store, opts ...Option) {
	t.Helper()
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	plans := o.calls(lockGoroutines*lockPlans) / lockGoroutines
	t.Run("hot_bucket", func(t *testing.T) { testHotBucket(t, stores(t, f)) })
	t.Run("overlapping_plans", func(t *testing.T) { testOverlappingPlans(t, stores(t, f), plans) })
	t.Run("hot_parent", func(t *testing.T) { testHotParent(t, stores(t, f)) })
}

func stores(t *testing.T, f func(t *testing.T) []Store) []Store {
	t.Helper()
	ss := f(t)
	if len(ss) == 0 {
		t.Fatalf("storetest: factory returned no stores")
	}
	for i, s := range ss {
		if s == nil {
			t.Fatalf("storetest: factory returned a nil store at %d", i)
		}
	}
	return ss
}

// testHotBucket hammers one bucket and checks that the store admits no more
// than capacity + refill·elapsed, and at least 95% of what an ideal bucket
// would have admitted to the same calls. The ideal is replayed from a
// per-millisecond histogram of the calls, so that time the whole process
// spent descheduled (a loaded machine) is not held against the store; on an
// idle machine it is capacity + refill·window.
func testHotBucket(t *testing.T, ss []Store) {
	d := cascade.Debit{
		Key:    cascade.Key{Namespace: "storetest", Entity: "hot", Resource: "bucket"},
		Limit:  "rps",
		Bucket: hotLimit,
		Amount: tok,
		Op:     cascade.Consume,
	}
	bins := int(hotDuration/time.Millisecond) + 1000
	var (
		admitted, calls, failures atomic.Int64
		firstErr                  atomic.Value
		wg                        sync.WaitGroup
		mu                        sync.Mutex
		hist                      = make([]int64, bins)
	)
	start := time.Now()
	stop := start.Add(hotDuration)
	for g := range hotGoroutines {
		s := ss[g%len(ss)]
		wg.Go(func() {
			local := make([]int64, bins)
			p := &cascade.Plan{Debits: []cascade.Debit{d}}
			for now := time.Now(); now.Before(stop); {
				dec, err := s.Acquire(context.Background(), p)
				now = time.Now()
				local[min(int(now.Sub(start)/time.Millisecond), bins-1)]++
				calls.Add(1)
				if err != nil {
					failures.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				if dec.Admitted {
					admitted.Add(1)
				}
			}
			mu.Lock()
			for i, n := range local {
				hist[i] += n
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if n := failures.Load(); n > 0 {
		t.Fatalf("Acquire failed %d of %d times; first error: %v", n, calls.Load(), firstErr.Load())
	}
	// The store's clock is in whole milliseconds: allow one more.
	elapsedMs := int64(elapsed/time.Millisecond) + 1
	periodMs := int64(hotLimit.RefillPeriod / time.Millisecond)
	most := int64(hotLimit.Capacity) + int64(hotLimit.RefillAmount)*elapsedMs/periodMs
	least := idealAdmits(hist) * int64(tok) * 95 / 100
	got := admitted.Load() * int64(tok)
	if got > most {
		t.Errorf("%d goroutines over %v on %d instances admitted %d tokens, want at most %d (capacity + refill·elapsed)",
			hotGoroutines, elapsed, len(ss), got/int64(tok), most/int64(tok))
	}
	if got < least {
		t.Errorf("%d goroutines over %v on %d instances admitted %d tokens in %d calls, want at least %d (95%% of an ideal bucket's admissions for the same calls)",
			hotGoroutines, elapsed, len(ss), got/int64(tok), calls.Load(), least/int64(tok))
	}
	t.Logf("admitted %d tokens in %d calls over %v (bounds %d..%d)", got/int64(tok), calls.Load(), elapsed, least/int64(tok), most/int64(tok))
}

// idealAdmits replays calls (per millisecond since the start) against an
// ideal hotLimit bucket, full at the start, and returns the whole-token
// consumptions it admits.
func idealAdmits(calls []int64) int64 {
	perMs := int64(hotLimit.RefillAmount) / int64(hotLimit.RefillPeriod/time.Millisecond)
	tokens, capacity := int64(hotLimit.Capacity), int64(hotLimit.Capacity)
	var admits int64
	for i, n := range calls {
		if i > 0 {
			tokens = min(capacity, tokens+perMs)
		}
		k := min(n, tokens/int64(tok))
		admits += k
		tokens -= k * int64(tok)
	}
	return admits
}

// lockBuckets are the bucket limits of testOverlappingPlans: four bucket
// items with two named limits each.
func lockBuckets() []cascade.Debit {
	var ds []cascade.Debit
	for i := range 4 {
		for _, name := range []string{"rpm", "tpm"} {
			ds = append(ds, cascade.Debit{
				Key:    cascade.Key{Namespace: "storetest", Entity: fmt.Sprintf("lock-%d", i), Resource: "plans"},
				Limit:  name,
				Bucket: frozenLimit,
				Op:     cascade.Consume,
			})
		}
	}
	return ds
}

// waitProgress waits until done is closed, and fails t as a deadlock when
// finished, out of total, stays the same for deadlockAfter. A slow store
// (DynamoDB Local on a busy machine took 100 s over what a quiet one does
// in 25) is not a deadlock; no plan finishing for a minute is.
func waitProgress(t *testing.T, done <-chan struct{}, finished *atomic.Int64, total int) {
	t.Helper()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	last, since := finished.Load(), time.Now()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
		}
		if n := finished.Load(); n != last {
			last, since = n, time.Now()
			continue
		}
		if time.Since(since) >= deadlockAfter {
			t.Fatalf("no plan finished for %v (%d of %d done): deadlock", deadlockAfter, last, total)
		}
	}
}

// testOverlappingPlans runs plans (per goroutine) over random subsets of shared buckets, in
// random order (so a store that locks in plan order would deadlock), and
// checks that every bucket lost exactly what the admitted plans debited.
func testOverlappingPlans(t *testing.T, ss []Store, plans int) {
	buckets := lockBuckets()
	var (
		debited  = make([]atomic.Int64, len(buckets))
		failures atomic.Int64
		firstErr atomic.Value
		wg       sync.WaitGroup
		done     = make(chan struct{})
	)
	var finished atomic.Int64 // plans decided or failed, for the watchdog
	for g := range lockGoroutines {
		s := ss[g%len(ss)]
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 0x5eed))
			idx := make([]int, 0, 5)
			for range plans {
				idx = idx[:0]
				p := &cascade.Plan{}
				for range 2 + rng.IntN(4) {
					i := rng.IntN(len(buckets))
					d := buckets[i]
					d.Amount = tokenbucket.Millitokens(1+rng.IntN(3)) * tok
					idx = append(idx, i)
					p.Debits = append(p.Debits, d)
				}
				dec, err := s.Acquire(context.Background(), p)
				finished.Add(1)
				if err != nil {
					failures.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				if dec.Admitted {
					for j, i := range idx {
						debited[i].Add(int64(p.Debits[j].Amount))
					}
				}
			}
		})
	}
	go func() { wg.Wait(); close(done) }()
	waitProgress(t, done, &finished, lockGoroutines*plans)
	if n := failures.Load(); n > 0 {
		t.Fatalf("Acquire failed %d times; first error: %v", n, firstErr.Load())
	}
	var total int64
	for i, b := range buckets {
		want := frozenLimit.Capacity - tokenbucket.Millitokens(debited[i].Load())
		if got := remaining(t, ss[i%len(ss)], b); got != want {
			t.Errorf("bucket %v %s remaining = %d, want %d (capacity − admitted debits)", b.Key, b.Limit, got, want)
		}
		total += debited[i].Load()
	}
	if total == 0 {
		t.Errorf("no plan was admitted; want the buckets to admit until exhausted")
	}
}

// Hot parent: chainKeys API keys under chainProjects projects under one
// tenant, every plan a key's chain (key → project → tenant), each level
// holding less than the sum of its children's, on frozen limits.
const (
	chainKeys     = 40
	chainProjects = 4
	chainPlans    = 60 // per goroutine
)

var (
	chainKeyLimit     = limit(20*tok, 1, 24*time.Hour)
	chainProjectLimit = limit(120*tok, 1, 24*time.Hour)
	chainTenantLimit  = limit(300*tok, 1, 24*time.Hour)
)

// testHotParent runs chain plans from many goroutines over the stores and
// checks that every level lost exactly what the admitted plans debited of
// it (so a refused plan debited nothing at any level, once every give-back
// landed), that no level admitted more than it holds, and that the tenant
// was exhausted.
func testHotParent(t *testing.T, ss []Store) {
	key := func(e string) cascade.Key {
		return cascade.Key{Namespace: "storetest", Entity: e, Resource: "chain"}
	}
	tiers := func(k int) []cascade.Debit {
		return []cascade.Debit{
			{Key: key(fmt.Sprintf("key-%d", k)), Limit: "rpm", Bucket: chainKeyLimit, Amount: tok, Op: cascade.Consume},
			{Key: key(fmt.Sprintf("project-%d", k%chainProjects)), Limit: "rpm", Bucket: chainProjectLimit, Amount: tok, Op: cascade.Consume, Depth: 1},
			{Key: key("tenant"), Limit: "rpm", Bucket: chainTenantLimit, Amount: tok, Op: cascade.Consume, Depth: 2},
		}
	}
	var (
		keys, projects [chainKeys]atomic.Int64
		tenant         atomic.Int64
		failures       atomic.Int64
		firstErr       atomic.Value
		wg             sync.WaitGroup
	)
	var finished atomic.Int64 // plans decided or failed, for the watchdog
	for g := range lockGoroutines {
		s := ss[g%len(ss)]
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 0xc4a1))
			for range chainPlans {
				k := rng.IntN(chainKeys)
				p := &cascade.Plan{Debits: tiers(k)}
				dec, err := s.Acquire(context.Background(), p)
				finished.Add(1)
				if err != nil {
					failures.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				if dec.Admitted {
					keys[k].Add(1)
					projects[k%chainProjects].Add(1)
					tenant.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := failures.Load(); n > 0 {
		t.Fatalf("Acquire failed %d times; first error: %v", n, firstErr.Load())
	}
	for k := range chainKeys {
		d := tiers(k)[0]
		if got, want := remaining(t, ss[0], d), d.Bucket.Capacity-tokenbucket.Millitokens(keys[k].Load())*tok; got != want {
			t.Errorf("key-%d remaining = %d, want %d (capacity − admitted)", k, got, want)
		}
	}
	for p := range chainProjects {
		d := tiers(p)[1]
		if got, want := remaining(t, ss[0], d), d.Bucket.Capacity-tokenbucket.Millitokens(projects[p].Load())*tok; got != want {
			t.Errorf("project-%d remaining = %d, want %d (capacity − admitted)", p, got, want)
		}
		if projects[p].Load() > 120 {
			t.Errorf("project-%d admitted %d, more than its 120", p, projects[p].Load())
		}
	}
	d := tiers(0)[2]
	if got, want := remaining(t, ss[0], d), d.Bucket.Capacity-tokenbucket.Millitokens(tenant.Load())*tok; got != want {
		t.Errorf("tenant remaining = %d, want %d (capacity − admitted)", got, want)
	}
	// The callers ask 960 times of a tenant of 300: it is exhausted, less
	// what contention refused near the end (a store with conditional
	// writes refuses a plan it could not decide within its budget).
	if n := tenant.Load(); n > 300 || n < 291 {
		t.Errorf("tenant admitted %d of %d plans, want 291 to 300 (its capacity, at least 97%%)", n, lockGoroutines*chainPlans)
	}
}

// remaining checks d's bucket on s (a zero-hit check, which debits nothing)
// and returns what it holds.
func remaining(t *testing.T, s Store, d cascade.Debit) tokenbucket.Millitokens {
	t.Helper()
	d.Op, d.Amount = cascade.Check, 0
	p := &cascade.Plan{Debits: []cascade.Debit{d}}
	dec, err := s.Acquire(context.Background(), p)
	if err != nil {
		t.Fatalf("Acquire(%s) error = %v, want nil", describe(p), err)
	}
	return dec.Statuses[0].Remaining
}
