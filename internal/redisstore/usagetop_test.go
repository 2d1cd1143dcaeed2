package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/internal/redisstore"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// TestWindowUsage: WindowUsage finds every entity's usage of a resource in
// one window by SCAN, entities with braces, '*' and a resource's key part
// in their names included, and leaves out another resource whose key ends
// the same, another window and another namespace.
func TestWindowUsage(t *testing.T) {
	c := server(t)
	clock := time.Date(2026, 3, 31, 14, 10, 0, 0, time.UTC)
	s := redisstore.New(c, redisstore.Config{Namespace: "wu", Now: func() time.Time { return clock }, Timeout: time.Second, UsageRetention: 400 * 24 * time.Hour})
	t.Cleanup(func() { _ = s.Close() })
	l, _ := tokenbucket.Rate(100, time.Hour, 0)
	ctx := context.Background()
	consume := func(ns, entity, res string, n int) {
		t.Helper()
		dec, err := s.Acquire(ctx, &cascade.Plan{Debits: []cascade.Debit{{Key: cascade.Key{Namespace: ns, Entity: entity, Resource: res}, Limit: "rph", Bucket: l, Amount: tokenbucket.Millitokens(n) * tokenbucket.PerToken}}})
		if err != nil || !dec.Admitted {
			t.Fatalf("Acquire = %+v, %v", dec, err)
		}
	}
	consume("", "a", "gpt-4", 3)
	consume("", "b}u5:gpt-4*{", "gpt-4", 2)
	consume("", "c", "x5:gpt-4", 7) // its key ends as gpt-4's does
	consume("other", "d", "gpt-4", 9)
	clock = clock.Add(time.Hour)
	consume("", "e", "gpt-4", 4) // the next hour
	snaps, complete, err := s.WindowUsage(ctx, "", "gpt-4", redisstore.Hourly, time.Date(2026, 3, 31, 14, 59, 0, 0, time.UTC))
	if err != nil || !complete {
		t.Fatalf("WindowUsage = %v, complete %t", err, complete)
	}
	got := map[string]int64{}
	for _, sn := range snaps {
		if sn.Resource != "gpt-4" || sn.Namespace != "wu" || !sn.Start.Equal(time.Date(2026, 3, 31, 14, 0, 0, 0, time.UTC)) {
			t.Errorf("snapshot %+v: want gpt-4 of namespace wu at 14:00", sn)
		}
		got[sn.Entity] += sn.Limits["rph"]
	}
	if len(got) != 2 || got["a"] != 3000 || got["b}u5:gpt-4*{"] != 2000 {
		t.Errorf("WindowUsage of gpt-4 at 14:00 = %v, want a 3000 and b}u5:gpt-4*{ 2000 only", got)
	}
	if snaps, _, err := s.WindowUsage(ctx, "other", "gpt-4", redisstore.Daily, clock); err != nil || len(snaps) != 1 || snaps[0].Entity != "d" {
		t.Errorf("WindowUsage of namespace other, daily = %+v, %v; want d alone", snaps, err)
	}
}
