package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/internal/redisstore"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// TestUsage: the decision's own call adds what admitted plans, charges
// and refunds consumed to each entity's hourly, daily and monthly usage;
// a refused plan counts nothing; usage list of every resource reads it.
func TestUsage(t *testing.T) {
	c := server(t)
	clock := time.Date(2026, 3, 31, 23, 59, 0, 0, time.UTC)
	s := redisstore.New(c, redisstore.Config{Now: func() time.Time { return clock }, Timeout: time.Second, UsageRetention: 400 * 24 * time.Hour}) // expiries are at Redis's clock
	t.Cleanup(func() { _ = s.Close() })
	l, _ := tokenbucket.Rate(3, time.Hour, 0)
	ctx := context.Background()
	ask := func(res string, op cascade.Op, n tokenbucket.Millitokens) bool {
		t.Helper()
		dec, err := s.Acquire(ctx, &cascade.Plan{Debits: []cascade.Debit{
			{Key: cascade.Key{Entity: "acme", Resource: res}, Limit: "rph", Bucket: l, Op: op, Amount: n},
		}})
		if err != nil {
			t.Fatal(err)
		}
		return dec.Admitted
	}
	for range 4 {
		ask("gpt", cascade.Consume, 1000) // 3 admitted, 1 refused
	}
	ask("gpt", cascade.Refund, 500)
	ask("embed", cascade.Consume, 2000)
	clock = clock.Add(2 * time.Minute) // April
	ask("embed", cascade.Consume, 1000)
	snaps, err := s.Usage(ctx, "", "acme", "", redisstore.Monthly, time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sn := range snaps {
		got[sn.Start.Format("2006-01")+"/"+sn.Resource] = sn.Limits["rph"]
	}
	want := map[string]int64{"2026-03/embed": 2000, "2026-03/gpt": 2500, "2026-04/embed": 1000}
	if len(got) != len(want) {
		t.Fatalf("monthly usage %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("monthly usage %s = %d, want %d (all: %v)", k, got[k], v, got)
		}
	}
	hourly, err := s.Usage(ctx, "", "acme", "gpt", redisstore.Hourly, clock.Add(-2*time.Hour))
	if err != nil || len(hourly) != 1 || hourly[0].Limits["rph"] != 2500 {
		t.Errorf("hourly usage of gpt = %+v, %v; want one hour of 2500", hourly, err)
	}
}
