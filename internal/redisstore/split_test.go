package redisstore_test

import (
	"context"
	"fmt"
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
	sp := redisstore.NewSplit(
		redisstore.New(mainC, redisstore.Config{Now: now, Timeout: time.Second}),
		redisstore.New(psC, redisstore.Config{Now: now, Timeout: time.Second}),
	)
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

// TestSplitOnCluster: with REDIS_PERSECOND on clusters, a store's part of
// a plan whose items lie in several slots is decided slot by slot, and a
// per-second store names its keys by Main's chains: a hierarchy's
// per-second levels are one part there too.
func TestSplitOnCluster(t *testing.T) {
	mainC, _ := cluster(t)
	psC, _ := cluster(t)
	sp := redisstore.NewSplit(
		redisstore.New(mainC, redisstore.Config{Namespace: "ns", Timeout: time.Second}),
		redisstore.New(psC, redisstore.Config{Namespace: "ns", Timeout: time.Second}),
	)
	t.Cleanup(func() { _ = sp.Close() })
	ctx := context.Background()
	for _, e := range []redisstore.Entity{{ID: "tenant", Cascade: true}, {ID: "key", Parent: "tenant"}} {
		if _, _, err := sp.PutEntity(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	perSec, _ := tokenbucket.Rate(2, time.Second, 0)
	perHour, _ := tokenbucket.Rate(100, time.Hour, 0)
	debit := func(entity, limit string, l tokenbucket.Limit) cascade.Debit {
		return cascade.Debit{Key: cascade.Key{Entity: entity, Resource: "api"}, Limit: limit, Bucket: l, Amount: tokenbucket.PerToken}
	}
	other := "b"
	for i := 0; redisstore.SlotOf(redisstore.BucketKey("ns", cascade.Key{Entity: other})) == redisstore.SlotOf(redisstore.BucketKey("ns", cascade.Key{Entity: "a"})); i++ {
		other = fmt.Sprintf("b%d", i)
	}
	plan := &cascade.Plan{Debits: []cascade.Debit{debit("a", "rps", perSec), debit(other, "rps", perSec), debit("a", "rph", perHour)}}
	var got []bool
	for range 3 {
		dec, err := sp.Acquire(ctx, plan)
		if err != nil {
			t.Fatalf("Acquire over two slots of the per-second cluster: %v", err)
		}
		got = append(got, dec.Admitted)
	}
	if got[0] != true || got[1] != true || got[2] != false {
		t.Errorf("admitted %v, want [true true false]: 2 a second", got)
	}
	chain := []cascade.Debit{debit("key", "rps", perSec), debit("tenant", "rps", perSec)}
	if n, err := sp.PerSecond.SlotParts(ctx, chain); err != nil || n != 1 {
		t.Errorf("a chain's per-second levels are in %d parts (%v), want 1: the root from Main's records", n, err)
	}
}
