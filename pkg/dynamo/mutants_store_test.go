package dynamo_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/internal/storetest"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// Equivalent mutants, read by internal/mutants (make mutation):
//
// mutant: CONDITIONALS_BOUNDARY store.go `len(first) > 0` decide: with no part gated, awaitAll of none waits for nothing and stopped of none is false, so the plan goes on as when the branch is skipped.

// TestValueOfMaxBytes: an entity, resource and limit name of exactly
// MaxValueBytes are stored; a byte more is an invalid plan.
func TestValueOfMaxBytes(t *testing.T) {
	f := fakeTable(t)
	s := newStore(t, f, "t", newClock())
	lim := mustLimit(t, 1, time.Second, 0)
	long := strings.Repeat("x", dynamo.MaxValueBytes)
	p := &cascade.Plan{Debits: []cascade.Debit{{Key: cascade.Key{Entity: long, Resource: long}, Limit: long, Bucket: lim, Amount: tokenbucket.PerToken}}}
	if dec, err := s.Acquire(context.Background(), p); err != nil || !dec.Admitted {
		t.Errorf("Acquire(values of %d bytes) = %+v, %v, want admitted", dynamo.MaxValueBytes, dec, err)
	}
	p.Debits[0].Limit += "x"
	if _, err := s.Acquire(context.Background(), p); !errors.Is(err, cascade.ErrInvalid) {
		t.Errorf("Acquire(limit name of %d bytes) = %v, want an error wrapping cascade.ErrInvalid", dynamo.MaxValueBytes+1, err)
	}
}

// TestChargeBudgetIsFourTimeouts: a plan that only charges is decided
// within 4×Timeout when that passes costBudget (1 s): with a Timeout of 2 s,
// a charge whose stored limits DynamoDB throttles for 1.5 s still waits for
// them, and lands.
func TestChargeBudgetIsFourTimeouts(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		f := fakeTable(t)
		s := newStoreCfg(t, f, dynamo.Config{Table: "t", Timeout: 2 * time.Second, RejectionCacheSize: dynamo.RejectionCacheOff}, newClock())
		lim := mustLimit(t, 10, time.Hour, 0)
		until := time.Now().Add(1500 * time.Millisecond)
		f.SetFail(func(_ context.Context, op string) error {
			return failIf(op == "BatchGetItem" && time.Now().Before(until), throttled())
		})
		chargeLands(t, s, lim, "its limits' read throttled for 1.5 s")
	})
}

// chargeLands charges 3 of lim's 10 tokens to a fresh item on s, and wants
// the charge applied.
func chargeLands(t *testing.T, s *dynamo.Store, lim tokenbucket.Limit, what string) {
	t.Helper()
	a := cascade.Key{Entity: "a", Resource: "r"}
	p := &cascade.Plan{Debits: []cascade.Debit{{Key: a, Limit: "x", Bucket: lim, Op: cascade.Charge, Amount: 3 * tokenbucket.PerToken}}}
	if dec, err := s.Acquire(context.Background(), p); err != nil || !dec.Statuses[0].OK {
		t.Fatalf("Acquire(charge, %s) = %+v, %v, want it charged", what, dec, err)
	}
	if got := tokensOf(t, s, lim, a)[0]; got != 7*tokenbucket.PerToken {
		t.Errorf("tokens of a after the charge = %d, want %d", got, 7*tokenbucket.PerToken)
	}
}

// TestRefusedPlanOverItemsOfSeveralLimits: a plan over two items, the
// second with two limits of which the last refuses, is answered as
// cascade.Decide answers the whole plan (the reference store): each debit
// on its own item's level.
func TestRefusedPlanOverItemsOfSeveralLimits(t *testing.T) {
	f := fakeTable(t)
	c := newClock()
	s := newStore(t, f, "t", c)
	ref := storetest.NewReference(c.Now)
	a, b := cascade.Key{Entity: "a", Resource: "r"}, cascade.Key{Entity: "b", Resource: "r"}
	wide, narrow := mustLimit(t, 10, time.Hour, 0), mustLimit(t, 2, time.Hour, 0)
	plans := []*cascade.Plan{
		{Debits: []cascade.Debit{{Key: b, Limit: "z", Bucket: narrow, Amount: 2 * tokenbucket.PerToken}}},
		{Debits: []cascade.Debit{
			{Key: a, Limit: "x", Bucket: wide, Amount: 3 * tokenbucket.PerToken},
			{Key: b, Limit: "y", Bucket: wide, Amount: 4 * tokenbucket.PerToken},
			{Key: b, Limit: "z", Bucket: narrow, Amount: tokenbucket.PerToken},
		}},
	}
	for i, p := range plans {
		got, err := s.Acquire(context.Background(), p)
		if err != nil {
			t.Fatalf("plan %d: Acquire() = %v", i, err)
		}
		want, _ := ref.Acquire(context.Background(), p)
		if got.Admitted != want.Admitted || len(got.Statuses) != len(want.Statuses) {
			t.Fatalf("plan %d: Acquire() = %+v, want %+v", i, got, want)
		}
		for j, st := range got.Statuses {
			w := want.Statuses[j]
			if st.OK != w.OK || st.Remaining != w.Remaining || st.RetryAfter != w.RetryAfter || st.ResetAfter != w.ResetAfter {
				t.Errorf("plan %d: status %d = %+v, want %+v", i, j, st, w)
			}
		}
	}
}
