package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/internal/redisstore"
	"github.com/dynalimit/dynalimit/internal/storetest"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// wideLimits take the script's levels through both of its number forms:
// pairs on doubles (the first two: levels near 10^18 and 10^28, the
// second a refill just under the 10^14 bound of clock·rate on doubles),
// limbs (refills of 10^14 and more, capacities near MaxMillitokens, whose
// levels pass 10^30), and both in one plan.
var wideLimits = []tokenbucket.Limit{
	{Capacity: 5000, RefillAmount: 1000, RefillPeriod: time.Second},
	{Capacity: 1 << 52, RefillAmount: 99_999_999_999_999, RefillPeriod: time.Millisecond},
	{Capacity: 100_000_000_000_000, RefillAmount: 100_000_000_000_000, RefillPeriod: 7 * time.Millisecond},
	{Capacity: tokenbucket.MaxMillitokens, RefillAmount: tokenbucket.MaxMillitokens, RefillPeriod: 24 * time.Hour},
	{Capacity: tokenbucket.MaxMillitokens / 3, RefillAmount: 3, RefillPeriod: 10 * 365 * 24 * time.Hour},
	{Capacity: 1<<53 + 1, RefillAmount: 1<<53 - 1, RefillPeriod: 1000 * time.Hour},
}

// TestAcquireAgainstReferenceWide drives the store and the reference
// store (cascade.Decide, pkg/tokenbucket's integer GCRA, over levels held
// in memory) with the same random plans at the same instants over
// wideLimits, with amounts from nothing to past capacity and the clock
// advanced by milliseconds to decades, and wants the same decisions. Some
// steps send the same plan from several callers at once, so that the
// script decides them in one call; their decisions are then compared as a
// set.
func TestAcquireAgainstReferenceWide(t *testing.T) {
	c := server(t)
	rng := rand.New(rand.NewPCG(38, 53))
	for input := range 40 {
		clock := storetest.NewClock(storetest.Epoch)
		s := redisstore.New(c, redisstore.Config{Namespace: fmt.Sprint("wide", input), Now: clock.Now, Timeout: 5 * time.Second})
		ref := storetest.NewReference(clock.Now)
		for step := range 40 {
			clock.Advance(elapsed(rng))
			p := widePlan(rng)
			callers := 1
			if rng.IntN(4) == 0 {
				callers = 2 + rng.IntN(7)
			}
			var want []string
			for range callers {
				d, _ := ref.Acquire(context.Background(), p)
				want = append(want, fmt.Sprint(d))
			}
			got := make([]string, callers)
			var wg sync.WaitGroup
			for k := range callers {
				wg.Go(func() {
					d, err := s.Acquire(context.Background(), p)
					if err != nil {
						t.Errorf("input %d step %d: Acquire(%+v): %v", input, step, p, err)
					}
					got[k] = fmt.Sprint(d)
				})
			}
			wg.Wait()
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("input %d step %d: Acquire(%+v) ×%d =\n%v, want\n%v", input, step, p, callers, got, want)
			}
		}
		_ = s.Close()
	}
}

// elapsed is a random advance of the clock: mostly milliseconds to
// seconds, sometimes days to decades.
func elapsed(rng *rand.Rand) time.Duration {
	switch rng.IntN(8) {
	case 0:
		return time.Duration(rng.Int64N(int64(40*365*24*time.Hour/time.Millisecond))) * time.Millisecond
	case 1:
		return time.Duration(rng.Int64N(int64(30*24*time.Hour/time.Millisecond))) * time.Millisecond
	}
	return time.Duration(rng.IntN(3000)) * time.Millisecond
}

// widePlan is a random plan of one to three debits over two keys and
// wideLimits.
func widePlan(rng *rand.Rand) *cascade.Plan {
	p := &cascade.Plan{}
	for range 1 + rng.IntN(3) {
		li := rng.IntN(len(wideLimits))
		l := wideLimits[li]
		var amount tokenbucket.Millitokens
		switch rng.IntN(5) {
		case 0:
			amount = 0
		case 1:
			amount = l.Capacity - tokenbucket.Millitokens(rng.IntN(2)) // all of it, or all but a millitoken
		case 2:
			amount = min(l.Capacity+1+tokenbucket.Millitokens(rng.IntN(3)), tokenbucket.MaxMillitokens) // too big
		default:
			amount = 1 + tokenbucket.Millitokens(rng.Int64N(int64(l.Capacity)/4+1))
		}
		p.Debits = append(p.Debits, cascade.Debit{
			Key:   cascade.Key{Entity: fmt.Sprint("e", rng.IntN(2)), Resource: "r"},
			Limit: fmt.Sprint("l", li), Bucket: l, Amount: amount,
			Op: cascade.Op(rng.IntN(4)), Role: cascade.Role(rng.IntN(3)),
		})
	}
	return p
}
