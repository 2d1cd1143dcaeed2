package memstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/internal/storetest"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// TestMaxBytes: at the byte bound a new key drops the buckets that are full
// again; when none is, it evicts the one nearest to full, forgiving its
// deficit, and is decided like any other key.
func TestMaxBytes(t *testing.T) {
	c := storetest.NewClock(storetest.Epoch)
	per := entryBytes(&bucketKey{key: cascade.Key{Namespace: "default", Entity: "a", Resource: "api"}, limit: "rpm"})
	s := New(WithClock(c.Now), WithShards(1), WithMaxBytes(3*per))
	mustAcquire(t, s, debit("a", slow, cascade.Consume, 3000))
	mustAcquire(t, s, debit("b", slow, cascade.Consume, 1000))
	mustAcquire(t, s, debit("c", slow, cascade.Consume, 2000))
	if dec := mustAcquire(t, s, debit("d", slow, cascade.Consume, 1000)); !dec.Admitted || dec.Statuses[0].Remaining != 2000 {
		t.Fatalf("Acquire(new key at the byte bound) = %+v, want admitted with 2000 remaining", dec)
	}
	if got, want := s.Stats(), (Stats{Buckets: 3, Bytes: 3 * per, EvictedNotFull: 1, ForgivenMillitokens: 1000}); got != want {
		t.Fatalf("Stats() = %+v, want %+v (b, nearest to full, evicted)", got, want)
	}
	for _, k := range []struct {
		entity string
		want   tokenbucket.Millitokens
	}{{"a", 0}, {"c", 1000}, {"d", 2000}} {
		if got := remaining(t, s, k.entity, slow); got != k.want {
			t.Errorf("remaining(%s) = %d, want %d (kept)", k.entity, got, k.want)
		}
	}
	// A check on a new key stores nothing and evicts nothing.
	if got := remaining(t, s, "b", slow); got != 3000 {
		t.Errorf("remaining(b) = %d, want 3000 (evicted: it starts full)", got)
	}
	if got := s.Stats(); got.EvictedNotFull != 1 || got.Buckets != 3 {
		t.Errorf("after checks, Stats() = %+v, want still 3 buckets and 1 eviction", got)
	}
	// A key too large for a shard is an invalid debit.
	huge := strings.Repeat("h", int(3*per))
	if _, err := acquire(t, s, debit(huge, l3, cascade.Consume, 1000)); !errors.Is(err, cascade.ErrInvalid) {
		t.Fatalf("Acquire(key larger than the bound) error = %v, want cascade.ErrInvalid", err)
	}
	// c and d are full again after 40 s; the insert drops one of them, and
	// keeps a.
	c.Advance(40 * time.Second)
	if dec := mustAcquire(t, s, debit("e", slow, cascade.Consume, 1000)); !dec.Admitted {
		t.Fatalf("Acquire(new key, c full again) = %+v, want admitted", dec)
	}
	if got := s.Stats(); got.Buckets != 3 || got.EvictedFull != 1 || got.EvictedNotFull != 1 || got.Bytes != 3*per {
		t.Fatalf("Stats() = %+v, want 3 buckets, %d bytes, 1 eviction of each kind", got, 3*per)
	}
	if got := remaining(t, s, "a", slow); got != 2000 {
		t.Fatalf("remaining(a) = %d, want 2000 (kept: it was not full)", got)
	}
}

// TestMemoryBound: eight goroutines storing distinct 1 MB keys, every one
// decided (evicting at the bound), stay within the byte bound, by the store's accounting, by what its shards reference,
// and by the live heap.
//
// The heap is measured only while the workers are paused between plans: a
// GC run while they allocate 1 MB values leaves HeapAlloc counting
// everything allocated since its mark phase began (on a loaded machine,
// 100–200 MB of values already garbage), which says nothing about what the
// store retains. Paused, no value is in flight, so after a GC the heap
// above the empty store's is exactly what the store retains (its keys, the
// entries, the maps) plus heapOverhead.
func TestMemoryBound(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates gigabytes")
	}
	const (
		maxBytes = 64 << 20
		workers  = 8
		valueLen = 1 << 20
		// heapOverhead is what the live heap may hold besides the bytes the
		// store accounts for: the shards' maps and the page rounding of ≤ 64
		// large keys (8 KB each).
		heapOverhead = 4 << 20
		samples      = 30
	)
	// Half the keys refill in 20 ms (evictable soon), half in an hour.
	fast := tokenbucket.Limit{Capacity: 1000, RefillAmount: 1000, RefillPeriod: 20 * time.Millisecond}
	s := New(WithMaxBytes(maxBytes), WithShards(8))
	before := liveHeap()
	var (
		stored atomic.Int64
		failed atomic.Value
		wg     sync.WaitGroup
		stop   = make(chan struct{})
		// Workers hold pause for reading while they build a value and
		// decide it; the sampler holds it for writing to measure.
		pause sync.RWMutex
	)
	for w := range workers {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				pause.RLock()
				l := slow
				if i%2 == 0 {
					l = fast
				}
				err := acquireValue(s, fmt.Sprintf("%d-%d-", w, i)+strings.Repeat("v", valueLen), l)
				pause.RUnlock()
				if err != nil {
					failed.CompareAndSwap(nil, err)
					return
				}
				stored.Add(1)
			}
		})
	}
	peakStats, peakHeap := int64(0), uint64(0)
	for range samples {
		time.Sleep(100 * time.Millisecond)
		peakStats = max(peakStats, s.Stats().Bytes)
		pause.Lock()
		peakHeap = max(peakHeap, liveHeap())
		checkShards(t, s)
		pause.Unlock()
	}
	close(stop)
	wg.Wait()
	if err := failed.Load(); err != nil {
		t.Fatalf("Acquire error = %v, want nil (a store at its bound evicts)", err)
	}
	st := s.Stats()
	peakStats = max(peakStats, st.Bytes)
	peakHeap = max(peakHeap, liveHeap())
	checkShards(t, s)
	if peakStats > maxBytes {
		t.Errorf("Stats().Bytes peaked at %d, want ≤ %d", peakStats, maxBytes)
	}
	if grown := int64(peakHeap) - int64(before); grown > maxBytes+heapOverhead {
		t.Errorf("live heap between plans peaked at %d KB over %d KB before, want ≤ %d KB more (bound + overhead)", grown>>10, before>>10, (maxBytes+heapOverhead)>>10)
	}
	if stored.Load() == 0 || st.EvictedNotFull == 0 {
		t.Errorf("stored %d, %+v; want plans decided and evictions of buckets not full", stored.Load(), st)
	}
	t.Logf("stored %d; peak accounted %d MB, peak live heap between plans +%d MB; %+v", stored.Load(), peakStats>>20, (int64(peakHeap)-int64(before))>>20, st)
	runtime.KeepAlive(s)
}

// acquireValue consumes a token of the bucket named by value (a fresh key)
// under limit l.
func acquireValue(s *Store, value string, l tokenbucket.Limit) error {
	_, err := s.Acquire(context.Background(), &cascade.Plan{Debits: []cascade.Debit{debit(value, l, cascade.Consume, 1000)}})
	return err
}

// liveHeap returns the heap in use after a full collection. It measures
// what is retained only while nothing allocates.
func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// checkShards checks that what each shard references is what it accounts
// for: its list holds exactly the entries of its map, none dropped, and
// their sizes (each key's bytes plus entryOverhead) add up to its byte
// count, within its bounds. An entry dropped but still linked, or linked
// but not in the map, would be memory the accounting does not see.
func checkShards(t *testing.T, s *Store) {
	t.Helper()
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n, bytes := 0, int64(0)
		for e := sh.ring.next; e != &sh.ring; e = e.next {
			if e.dead || e.transient || sh.m[e.key] != e {
				t.Errorf("shard %d lists an entry (dead %t, transient %t) that its map does not hold", i, e.dead, e.transient)
			}
			if got := entryBytes(&e.key); e.size != got {
				t.Errorf("shard %d entry size = %d, want %d", i, e.size, got)
			}
			n++
			bytes += e.size
		}
		if n != len(sh.m) || n != sh.n || bytes != sh.bytes || n > s.perShard || bytes > s.perShardBytes {
			t.Errorf("shard %d lists %d entries of %d bytes; map holds %d, accounted %d entries of %d bytes; bounds %d, %d bytes",
				i, n, bytes, len(sh.m), sh.n, sh.bytes, s.perShard, s.perShardBytes)
		}
		sh.mu.Unlock()
	}
}

// TestDecidingHoldsNoSharedLock: while a plan holds a bucket (as a long
// decision does), other keys of the same shard, new ones included, are
// decided, and the held bucket waits.
func TestDecidingHoldsNoSharedLock(t *testing.T) {
	s := New(WithShards(1))
	mustAcquire(t, s, debit("held", slow, cascade.Consume, 1000))
	e := s.shards[0].m[bucketKey{key: cascade.Key{Namespace: "default", Entity: "held", Resource: "api"}, limit: "rpm"}]
	e.mu.Lock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		mustAcquire(t, s, debit("held", slow, cascade.Consume, 1000))
	}()
	for i := range 100 {
		mustAcquire(t, s, debit(fmt.Sprint("other-", i), slow, cascade.Consume, 1000))
	}
	s.sweep(nil)
	_ = s.Stats()
	select {
	case <-done:
		t.Fatalf("Acquire(held) returned while its bucket was held")
	default:
	}
	e.mu.Unlock()
	<-done
	if got := remaining(t, s, "held", slow); got != 1000 {
		t.Fatalf("remaining(held) = %d, want 1000", got)
	}
}

// TestHugePlan: a plan of 60,000 debits of one bucket is decided in time
// linear in its size (it took 15.7 s when each refused debit rescanned the
// plan), and so is one of 60,000 distinct buckets.
func TestHugePlan(t *testing.T) {
	for _, distinct := range []bool{false, true} {
		t.Run(fmt.Sprint("distinct=", distinct), func(t *testing.T) {
			s := New(WithShards(4))
			p := &cascade.Plan{}
			for i := range 60_000 {
				e := "one"
				if distinct {
					e = fmt.Sprint("e", i)
				}
				p.Debits = append(p.Debits, debit(e, l3, cascade.Consume, 1000))
			}
			start := time.Now()
			dec, err := s.Acquire(context.Background(), p)
			if err != nil {
				t.Fatalf("Acquire(60,000 debits) error = %v", err)
			}
			// Generous for the race detector on a loaded machine; the
			// quadratic path took minutes there.
			if elapsed := time.Since(start); elapsed > 10*time.Second {
				t.Errorf("Acquire(60,000 debits) took %v, want well under 10 s", elapsed)
			}
			if dec.Admitted == !distinct {
				t.Errorf("Acquire(60,000 debits, distinct %t) admitted = %t", distinct, dec.Admitted)
			}
			if !distinct {
				// 60,000 tokens wanted of a 3-token bucket refilling 3 a
				// second: 59,997 tokens, 19,999 s away.
				if got, want := dec.Statuses[59_999].RetryAfter, 19_999*time.Second; got != want {
					t.Errorf("last status RetryAfter = %v, want %v", got, want)
				}
			}
		})
	}
}

// TestStress runs random plans from many goroutines over buckets that
// refill fast (dropped and recreated as they fill) and buckets that never
// refill, with a tight bound and a sweeper running, and checks that the
// frozen buckets lost exactly what the admitted plans debited, less what
// their evictions forgave (each put the bucket back to full).
func TestStress(t *testing.T) {
	frozen := tokenbucket.Limit{Capacity: 1 << 40, RefillAmount: 1, RefillPeriod: 24 * time.Hour}
	fast := tokenbucket.Limit{Capacity: 2000, RefillAmount: 2000, RefillPeriod: 5 * time.Millisecond}
	s := New(WithShards(4), WithMaxBuckets(40))
	const frozenKeys, fastKeys = 8, 200
	var (
		debited  [frozenKeys]atomic.Int64
		forgiven [frozenKeys]atomic.Int64
		workers  sync.WaitGroup
		sweeper  sync.WaitGroup
		stop     = make(chan struct{})
		failed   atomic.Value
	)
	s.onEvict = func(k bucketKey, deficit uint64, _ bool) {
		if v, ok := strings.CutPrefix(k.key.Entity, "frozen-"); ok {
			i, _ := strconv.Atoi(v)
			forgiven[i].Add(int64(deficit))
		}
	}
	sweeper.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				s.sweep(nil)
				runtime.Gosched()
			}
		}
	})
	for g := range 8 {
		workers.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 3))
			for range 3000 {
				p := &cascade.Plan{}
				var idx []int
				for range 1 + rng.IntN(4) {
					if rng.IntN(2) == 0 {
						i := rng.IntN(frozenKeys)
						idx = append(idx, i)
						p.Debits = append(p.Debits, debit(fmt.Sprint("frozen-", i), frozen, cascade.Consume, 1000))
					} else {
						idx = append(idx, -1)
						p.Debits = append(p.Debits, debit(fmt.Sprint("fast-", rng.IntN(fastKeys)), fast, cascade.Op(rng.IntN(4)), tokenbucket.Millitokens(rng.IntN(3000))))
					}
				}
				dec, err := s.Acquire(context.Background(), p)
				if err != nil {
					failed.CompareAndSwap(nil, err)
					return
				}
				if dec.Admitted {
					for j, i := range idx {
						if i >= 0 {
							debited[i].Add(int64(p.Debits[j].Amount))
						}
					}
				}
			}
		})
	}
	workers.Wait()
	close(stop)
	sweeper.Wait()
	if err := failed.Load(); err != nil {
		t.Fatalf("Acquire error = %v", err)
	}
	for i := range frozenKeys {
		dec, err := acquire(t, s, debit(fmt.Sprint("frozen-", i), frozen, cascade.Check, 0))
		if err != nil {
			t.Fatalf("Acquire(check frozen-%d) error = %v", i, err)
		}
		if got, want := dec.Statuses[0].Remaining, frozen.Capacity-tokenbucket.Millitokens(debited[i].Load()-forgiven[i].Load()); got != want {
			t.Errorf("frozen-%d remaining = %d, want %d (%d debited, %d forgiven)", i, got, want, debited[i].Load(), forgiven[i].Load())
		}
	}
	t.Logf("%+v", s.Stats())
}
