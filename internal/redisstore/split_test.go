package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/internal/redisstore"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// TestSplit: with REDIS_PERSECOND, a plan over a per-second and a
// per-minute limit is decided on both servers: admitted on both, or
// refused with nothing consumed on either (the admitted part given back);
// a settlement is applied once on each.
func TestSplit(t *testing.T) {
	mainC, psC := server(t), server(t)
	clock := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	now := func() time.Time { return clock }
	sp := &redisstore.Split{
		Main:      redisstore.New(mainC, redisstore.Config{Now: now, Timeout: time.Second}),
		PerSecond: redisstore.New(psC, redisstore.Config{Now: now, Timeout: time.Second}),
	}
	t.Cleanup(func() { _ = sp.Close() })
	perSec, _ := tokenbucket.Rate(2, time.Second, 0)
	perMin, _ := tokenbucket.Rate(10, time.Minute, 0)
	k := cascade.Key{Entity: "e", Resource: "api"}
	plan := &cascade.Plan{Debits: []cascade.Debit{
		{Key: k, Limit: "rps", Bucket: perSec, Amount: tokenbucket.PerToken},
		{Key: k, Limit: "rpm", Bucket: perMin, Amount: tokenbucket.PerToken},
	}}
	ctx := context.Background()
	var got []bool
	for range 3 {
		dec, err := sp.Acquire(ctx, plan)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, dec.Admitted)
	}
	if got[0] != true || got[1] != true || got[2] != false {
		t.Fatalf("admitted %v, want [true true false]: 2 a second", got)
	}
	// The third was refused by the per-second limit: the per-minute one
	// holds 8, its consume given back.
	check := &cascade.Plan{Debits: []cascade.Debit{{Key: k, Limit: "rpm", Bucket: perMin, Op: cascade.Check}}}
	dec, err := sp.Acquire(ctx, check)
	if err != nil || dec.Statuses[0].Remaining != 8*tokenbucket.PerToken {
		t.Errorf("per-minute after the refusal: %+v, %v; want 8 tokens", dec, err)
	}
	st := &cascade.Settlement{ID: "lease-1", Expires: clock.Add(time.Hour), Debits: []cascade.Debit{
		{Key: k, Limit: "rps", Bucket: perSec, Op: cascade.Refund, Amount: tokenbucket.PerToken},
		{Key: k, Limit: "rpm", Bucket: perMin, Op: cascade.Charge, Amount: tokenbucket.PerToken},
	}}
	for i, wantDup := range []bool{false, true} {
		res, err := sp.Settle(ctx, st)
		if err != nil || res.Duplicate != wantDup {
			t.Errorf("settle %d: %+v, %v; want duplicate %v", i, res, err, wantDup)
		}
	}
	dec, err = sp.Acquire(ctx, check)
	if err != nil || dec.Statuses[0].Remaining != 7*tokenbucket.PerToken {
		t.Errorf("per-minute after the settlement: %+v, %v; want 7 tokens", dec, err)
	}
}
