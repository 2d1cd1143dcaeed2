package memstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/internal/storetest"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// TestEvictionForgivesOnlyTheEvicted runs random plans, clock moves, sweeps
// and at-bound evictions, and checks every decision against the reference
// store told to forget exactly the buckets the store evicted while they
// held less than full: an eviction changes nothing but the evicted bucket,
// which comes back full, and the deficits the store reports forgiven add up
// to what those buckets lacked. The clock only moves forwards here: after
// it steps back, a full bucket's refill clock may be ahead of now, which a
// dropped bucket does not remember (see doc.go).
func TestEvictionForgivesOnlyTheEvicted(t *testing.T) {
	limits := []tokenbucket.Limit{
		{Capacity: 3000, RefillAmount: 3000, RefillPeriod: time.Second},
		{Capacity: 5000, RefillAmount: 1000, RefillPeriod: 3 * time.Second},
		{Capacity: 1000, RefillAmount: 7, RefillPeriod: 10 * time.Millisecond},
	}
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 42))
			clock := storetest.NewClock(storetest.Epoch)
			s := New(WithClock(clock.Now), WithShards(2), WithMaxBuckets(8))
			md := storetest.NewReference(clock.Now)
			var (
				before, after []bucketKey
				forgiven      uint64
			)
			s.onEvict = func(k bucketKey, deficit uint64, late bool) {
				if late {
					after = append(after, k)
				} else {
					before = append(before, k)
				}
				forgiven += deficit
			}
			for step := range 3000 {
				switch r := rng.IntN(100); {
				case r < 10:
					clock.Advance(time.Duration(rng.IntN(2000)) * time.Millisecond)
				case r < 15:
					s.sweep(nil)
				}
				p := &cascade.Plan{}
				for range 1 + rng.IntN(3) {
					e := rng.IntN(12)
					p.Debits = append(p.Debits, cascade.Debit{
						Key:    cascade.Key{Namespace: "ns", Entity: fmt.Sprint("e", e), Resource: "r"},
						Limit:  fmt.Sprint("l", e%2),
						Bucket: limits[e%len(limits)],
						Amount: tokenbucket.Millitokens(rng.IntN(2500)),
						Op:     cascade.Op(rng.IntN(4)),
						Role:   cascade.Role(rng.IntN(3)),
					})
				}
				got, err := s.Acquire(context.Background(), p)
				if err != nil {
					t.Fatalf("step %d: Acquire() error = %v", step, err)
				}
				// Buckets evicted to make room for the plan's new ones are
				// gone before it is decided; a new bucket no room was made
				// for is forgotten after.
				forget := func(ks []bucketKey) []bucketKey {
					for _, k := range ks {
						md.Forget(k.key, k.limit)
					}
					return ks[:0]
				}
				before = forget(before)
				want, _ := md.Acquire(context.Background(), p)
				after = forget(after)
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("step %d at +%v: Acquire(%+v) = %+v, want %+v", step, clock.Now().Sub(storetest.Epoch), p.Debits, got, want)
				}
			}
			st := s.Stats()
			if st.EvictedFull == 0 || st.EvictedNotFull == 0 {
				t.Errorf("Stats() = %+v after 3000 steps, want evictions of full and not-full buckets", st)
			}
			if st.ForgivenMillitokens != forgiven {
				t.Errorf("Stats().ForgivenMillitokens = %d, want %d (the evicted buckets' deficits)", st.ForgivenMillitokens, forgiven)
			}
			t.Logf("stats %+v", st)
		})
	}
}
