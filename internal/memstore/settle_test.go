package memstore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/internal/storetest"
	"github.com/dynalimit/dynalimit/pkg/cascade"
)

var _ storetest.Settler = (*Store)(nil)

func TestSettleConformance(t *testing.T) {
	storetest.RunSettle(t, func(t *testing.T, c *storetest.Clock) storetest.Settler {
		return New(WithClock(c.Now))
	})
}

func TestSettleConformanceOneShard(t *testing.T) {
	storetest.RunSettle(t, func(t *testing.T, c *storetest.Clock) storetest.Settler {
		return New(WithClock(c.Now), WithShards(1))
	})
}

func TestSettleConcurrency(t *testing.T) {
	storetest.RunSettleConcurrency(t, func(t *testing.T) []storetest.Settler {
		return []storetest.Settler{New()}
	})
}

func settlement(id string, expires time.Time, ds ...cascade.Debit) *cascade.Settlement {
	return &cascade.Settlement{ID: id, Expires: expires, Debits: ds}
}

func mustSettle(t *testing.T, s *Store, st *cascade.Settlement) cascade.Settled {
	t.Helper()
	got, err := s.Settle(context.Background(), st)
	if err != nil {
		t.Fatalf("Settle(%q) error = %v, want nil", st.ID, err)
	}
	return got
}

// TestSettleForgetsExpired: an ID is a duplicate until its Expires plus
// settleMargin, then forgotten (and may settle again); the store then
// remembers only the IDs still alive.
func TestSettleForgetsExpired(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	s := New(WithClock(func() time.Time { return now }), WithShards(1))
	exp := now.Add(time.Minute)
	mustSettle(t, s, settlement("a", exp, debit("e", l3, cascade.Charge, 1000)))
	mustSettle(t, s, settlement("b", exp.Add(time.Hour)))
	tests := []struct {
		at      time.Time
		id      string
		dup     bool
		holding int // IDs remembered after the call
	}{
		{exp, "a", true, 2},
		{exp.Add(settleMargin - time.Millisecond), "a", true, 2},
		{exp.Add(settleMargin), "a", false, 2}, // a forgotten, then settled again
		{exp.Add(time.Hour + settleMargin), "c", false, 2},
	}
	for _, tt := range tests {
		now = tt.at
		got := mustSettle(t, s, settlement(tt.id, tt.at.Add(time.Hour), debit("e", l3, cascade.Charge, 1)))
		if got.Duplicate != tt.dup {
			t.Errorf("at %v: Settle(%s).Duplicate = %v, want %v", tt.at.Sub(exp), tt.id, got.Duplicate, tt.dup)
		}
		if n := s.Settlements(); n != tt.holding {
			t.Errorf("at %v: Settlements() = %d, want %d", tt.at.Sub(exp), n, tt.holding)
		}
	}
}

// TestSettleBound: at the bound a new ID is refused with
// ErrTooManySettlements and nothing is applied; an ID already settled is
// still a duplicate; once IDs expire, new ones settle again.
func TestSettleBound(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	s := New(WithClock(func() time.Time { return now }), WithShards(1))
	s.perSettled = 3
	for i := range 3 {
		mustSettle(t, s, settlement(fmt.Sprint(i), now.Add(time.Duration(i+1)*time.Minute)))
	}
	if _, err := s.Settle(context.Background(), settlement("full", now.Add(time.Hour), debit("e", l3, cascade.Charge, 1000))); !errors.Is(err, ErrTooManySettlements) {
		t.Fatalf("Settle(a fourth ID of 3) error = %v, want ErrTooManySettlements", err)
	}
	if got := remaining(t, s, "e", l3); got != 3000 {
		t.Errorf("after a refused settlement the bucket holds %d, want 3000", got)
	}
	if got := mustSettle(t, s, settlement("0", now.Add(time.Hour))); !got.Duplicate {
		t.Errorf("Settle(0) at the bound = %+v, want a duplicate", got)
	}
	now = now.Add(time.Minute + settleMargin) // "0" expires
	if got := mustSettle(t, s, settlement("full", now.Add(time.Hour), debit("e", l3, cascade.Charge, 1000))); got.Duplicate {
		t.Errorf("Settle(full) once an ID expired = duplicate, want applied")
	}
	if got := remaining(t, s, "e", l3); got != 2000 {
		t.Errorf("after the settlement the bucket holds %d, want 2000", got)
	}
}
