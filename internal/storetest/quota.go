package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// demandMeter is the shape of the demand meter that a quota report
// charges beside its limits (service.DemandMeter): MaxMillitokens,
// refilled one token a minute.
var demandMeter = tokenbucket.Limit{Capacity: tokenbucket.MaxMillitokens, RefillAmount: tok, RefillPeriod: time.Minute}

// testQuotaReport holds a store to what an RLQS report asks of it: one
// plan that charges the allowed requests to a limit past zero and the
// demand to a meter in the same bucket item, advisory, and reads back
// both levels; the meter refills a token a minute, so that the store can
// expire the item.
func testQuotaReport(t *testing.T, f Factory) {
	clock := NewClock(Epoch)
	s := f(t, clock)
	lim := limit(100*tok, 100*tok, time.Second)
	report := func(allowed, demand tokenbucket.Millitokens) cascade.Decision {
		t.Helper()
		p := &cascade.Plan{Debits: plan(
			advisory(charge("q", lim, allowed)),
			advisory(named(charge("q", demandMeter, demand), "~rlqs.demand.0")),
		)}
		dec, err := s.Acquire(context.Background(), p)
		if err != nil {
			t.Fatalf("Acquire(%s) error = %v, want nil", describe(p), err)
		}
		if !dec.Admitted || len(dec.Statuses) != 2 {
			t.Fatalf("Acquire(%s) = %+v, want admitted with 2 statuses", describe(p), dec)
		}
		return dec
	}
	dec := report(150*tok, 400*tok)
	if got := dec.Statuses[0].Remaining; got != -50*tok {
		t.Errorf("limit after a charge of 150 of 100: %d, want -50 tokens", got)
	}
	if got := tokenbucket.MaxMillitokens - dec.Statuses[1].Remaining; got != 400*tok {
		t.Errorf("meter fell by %d, want 400 tokens", got)
	}
	clock.Advance(5 * time.Minute)
	dec = report(10*tok, 20*tok)
	if got := dec.Statuses[0].Remaining; got != 90*tok {
		t.Errorf("limit 5 minutes later after 10 more: %d, want 90 tokens", got)
	}
	if got := tokenbucket.MaxMillitokens - dec.Statuses[1].Remaining; got != 415*tok {
		t.Errorf("meter below full by %d, want 420 tokens less 5 minutes of refill", got)
	}
	clock.Advance(7 * time.Hour)
	dec = report(0, 0)
	if got := dec.Statuses[1].Remaining; got != tokenbucket.MaxMillitokens {
		t.Errorf("meter 7 hours later: %d, want full", got)
	}
}
