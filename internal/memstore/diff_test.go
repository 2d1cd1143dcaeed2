package memstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/internal/storetest"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// TestEvictionLosesNothing runs random plans, clock moves, sweeps and
// at-bound evictions, and checks every decision against a store that never
// forgets. Plans refused with ErrFull must leave no trace. The clock only
// moves forwards here: after it steps back, a full bucket's refill clock
// may be ahead of now, which a dropped bucket does not remember (see doc.go).
func TestEvictionLosesNothing(t *testing.T) {
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
			md := storetest.NewReference(clock.Now) // never forgets a bucket
			full := 0
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
				if errors.Is(err, ErrFull) {
					full++
					continue
				}
				if err != nil {
					t.Fatalf("step %d: Acquire() error = %v", step, err)
				}
				if want, _ := md.Acquire(context.Background(), p); !reflect.DeepEqual(got, want) {
					t.Fatalf("step %d at +%v: Acquire(%+v) = %+v, want %+v", step, clock.Now().Sub(storetest.Epoch), p.Debits, got, want)
				}
			}
			st := s.Stats()
			if st.Evictions == 0 {
				t.Errorf("Stats() = %+v after 3000 steps, want some evictions", st)
			}
			if st.Rejected != uint64(full) {
				t.Errorf("Stats().Rejected = %d, want %d", st.Rejected, full)
			}
			t.Logf("stats %+v", st)
		})
	}
}
