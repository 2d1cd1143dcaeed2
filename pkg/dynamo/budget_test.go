package dynamo_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/admin"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// TestBudgetBoundaryTwoReplicas: two replicas on one table, their clocks
// 3 ms apart, drive a monthly budget of 40 in New York across local
// midnight on the 1st, 10 goroutines each. Each month admits exactly its
// total, counted by the month the deciding replica was in: the replica
// still in February when the other is in March admits nothing more. No
// reset job runs; the period is in the bucket's state.
func TestBudgetBoundaryTwoReplicas(t *testing.T) {
	const total = 40
	l := dynamotest.Shared(t)
	name := dynamotest.TableName(t)
	l.CreateTable(context.Background(), t, name)
	api := l.Client(t)
	cal, err := tokenbucket.NewCalendar(tokenbucket.Monthly, "America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	budget, err := tokenbucket.Budget(total*tokenbucket.PerToken, cal, true)
	if err != nil {
		t.Fatal(err)
	}
	loc, _ := time.LoadLocation("America/New_York")
	boundary := time.Date(2027, time.March, 1, 0, 0, 0, 0, loc).UnixMilli()
	// A shared clock that crosses the boundary halfway; replica 1 lags.
	var tick atomic.Int64
	tick.Store(boundary - 200)
	lags := []int64{0, 3}
	var stores []*dynamo.Store
	for _, lag := range lags {
		now := func() time.Time { return time.UnixMilli(tick.Load() - lag) }
		s, err := dynamo.NewStore(context.Background(), api, dynamo.Config{Table: name, Timeout: 5 * time.Second, RejectionCacheSize: dynamo.RejectionCacheOff}, dynamo.WithClock(now))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		stores = append(stores, s)
	}
	key := cascade.Key{Namespace: "cal", Entity: "team", Resource: "llm"}
	p := cascade.Plan{Debits: []cascade.Debit{{Key: key, Limit: "monthly", Bucket: budget, Amount: tokenbucket.PerToken}}}
	// Three phases on a still clock: both replicas in February; replica 0
	// in March while replica 1 is still in February; both in March. Each
	// phase asks 20 goroutines × 6 decisions, more than the budget holds.
	admitted := map[string]int64{} // by the month the deciding replica was in
	var mu sync.Mutex
	for _, at := range []int64{boundary - 1, boundary + 1, boundary + 10} {
		tick.Store(at)
		var wg sync.WaitGroup
		for r, s := range stores {
			month := "February"
			if at-lags[r] >= boundary {
				month = "March"
			}
			for range 10 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 6 {
						plan := p
						d, err := s.Acquire(context.Background(), &plan)
						if err != nil {
							t.Error(err)
							return
						}
						if d.Admitted {
							mu.Lock()
							admitted[month]++
							mu.Unlock()
						}
					}
				}()
			}
		}
		wg.Wait()
	}
	if admitted["February"] != total || admitted["March"] != total {
		t.Errorf("admitted %v, want %d in each month", admitted, total)
	}
	t.Logf("admitted %v", admitted)
}

// A budget charged into debt, raised mid-period (what was spent is kept),
// shown without consuming, and reset for the current period by an
// operator: exact on both backends.
func TestBudgetRaiseShowReset(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.Name, func(t *testing.T) {
			api, table := b.API(t)
			c := newClock()
			s := newStore(t, api, table, c, dynamo.WithPrincipal("alice"))
			ctx := context.Background()
			cal, _ := tokenbucket.NewCalendar(tokenbucket.Monthly, "America/New_York")
			small, _ := tokenbucket.Budget(100*tokenbucket.PerToken, cal, true)
			big, _ := tokenbucket.Budget(200*tokenbucket.PerToken, cal, true)
			key := cascade.Key{Namespace: "cal", Entity: "team", Resource: "llm"}
			debit := func(l tokenbucket.Limit, op cascade.Op, n int64) cascade.Decision {
				p := &cascade.Plan{Debits: []cascade.Debit{{Key: key, Limit: "usd", Bucket: l, Op: op, Amount: tokenbucket.Millitokens(n) * tokenbucket.PerToken}}}
				d, err := s.Acquire(ctx, p)
				if err != nil {
					t.Fatal(err)
				}
				return d
			}
			if d := debit(small, cascade.Charge, 130); d.Statuses[0].Remaining != -30*tokenbucket.PerToken {
				t.Fatalf("after a charge of 130 of 100: %+v", d)
			}
			// Raised to 200 within the month: 130 spent, 70 left.
			if d := debit(big, cascade.Check, 0); !d.Admitted || d.Statuses[0].Remaining != 70*tokenbucket.PerToken {
				t.Fatalf("raised to 200: %+v", d)
			}
			limits := map[string]tokenbucket.Limit{"usd": big}
			st, err := admin.New(s).Bucket(ctx, key, limits)
			if err != nil || st.Total()["usd"].Tokens != 70*tokenbucket.PerToken || st.Total()["usd"].Limit != big {
				t.Fatalf("Bucket() = %+v, %v", st.Total(), err)
			}
			// Topped up by 50 for this month: 120; by 500 more: full, 200.
			for _, c := range []struct{ add, want int64 }{{50, 120}, {500, 200}} {
				if _, ok, err := admin.New(s).TopUp(ctx, key, "usd", tokenbucket.Millitokens(c.add)*tokenbucket.PerToken, limits); err != nil || !ok {
					t.Fatalf("TopUp(%d) = %t, %v", c.add, ok, err)
				}
				if st, _ := admin.New(s).Bucket(ctx, key, limits); st.Total()["usd"].Tokens != tokenbucket.Millitokens(c.want)*tokenbucket.PerToken {
					t.Fatalf("after a top-up of %d: %+v, want %d", c.add, st.Total()["usd"], c.want)
				}
			}
			if _, _, err := admin.New(s).TopUp(ctx, key, "eur", tokenbucket.PerToken, limits); !errors.Is(err, admin.ErrNoSuchLimit) {
				t.Errorf("TopUp(eur) = %v, want ErrNoSuchLimit", err)
			}
			debit(big, cascade.Consume, 150)
			if _, reset, err := admin.New(s).ResetBucket(ctx, key, limits); err != nil || !reset {
				t.Fatalf("ResetBucket() = %t, %v", reset, err)
			}
			recs, err := admin.New(s).Audit(ctx, admin.Scope{Namespace: "cal", Entity: "team"})
			actions := map[string]int{}
			for _, r := range recs {
				if r.Principal == "alice" {
					actions[r.Action]++
				}
			}
			if err != nil || len(recs) != 3 || actions["bucket.topup"] != 2 || actions["bucket.reset"] != 1 {
				t.Fatalf("Audit(team) = %+v, %v, want two top-ups and a reset by alice", recs, err)
			}
			if d := debit(big, cascade.Consume, 200); !d.Admitted || d.Statuses[0].Remaining != 0 {
				t.Fatalf("after the reset the month holds its 200: %+v", d)
			}
		})
	}
}
