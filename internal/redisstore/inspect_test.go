package redisstore_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/internal/redisstore"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

var (
	inspectKey = cascade.Key{Entity: "e", Resource: "r"}
	perMinute  = mustRate(10, time.Minute)
	perHour    = mustRate(60, time.Hour)
)

func mustRate(n uint64, per time.Duration) tokenbucket.Limit {
	l, err := tokenbucket.Rate(n, per, 0)
	if err != nil {
		panic(err)
	}
	return l
}

// acquire consumes mt millitokens of limit "rpm" under l, and reports
// whether it was admitted.
func acquire(t *testing.T, st bucketer, l tokenbucket.Limit, mt tokenbucket.Millitokens) bool {
	t.Helper()
	d := cascade.Debit{Key: inspectKey, Limit: "rpm", Bucket: l, Amount: mt, Op: cascade.Consume}
	dec, err := st.Acquire(t.Context(), &cascade.Plan{Debits: []cascade.Debit{d}})
	if err != nil {
		t.Fatal(err)
	}
	return dec.Admitted
}

// tokensOf is what limit rpm of the bucket holds by Bucket.
func tokensOf(t *testing.T, lv redisstore.Levels) (tokenbucket.Millitokens, bool) {
	t.Helper()
	for _, l := range lv.Limits {
		if l.Name == "rpm" {
			return l.Tokens, l.Stored
		}
	}
	t.Fatalf("levels %+v hold no rpm", lv)
	return 0, false
}

type bucketer interface {
	Acquire(ctx context.Context, p *cascade.Plan) (cascade.Decision, error)
	Bucket(ctx context.Context, key cascade.Key, limits map[string]tokenbucket.Limit) (redisstore.Levels, error)
	Reset(ctx context.Context, key cascade.Key, limits map[string]tokenbucket.Limit) (redisstore.Levels, bool, error)
	TopUp(ctx context.Context, key cascade.Key, name string, amount tokenbucket.Millitokens, limits map[string]tokenbucket.Limit) (redisstore.Levels, bool, error)
}

// TestInspect: what Bucket, Reset and TopUp report a bucket holds is what
// Acquire then decides on, exactly.
func TestInspect(t *testing.T) {
	now := time.UnixMilli(1_800_000_000_000)
	clock := func() time.Time { return now }
	c := server(t)
	st := redisstore.New(c, redisstore.Config{Now: clock, Timeout: time.Second})
	t.Cleanup(func() { _ = st.Close() })
	testInspect(t, st)
	t.Run("split", func(t *testing.T) {
		sp := redisstore.NewSplit(
			redisstore.New(server(t), redisstore.Config{Now: clock, Timeout: time.Second}),
			redisstore.New(server(t), redisstore.Config{Now: clock, Timeout: time.Second}),
		)
		t.Cleanup(func() { _ = sp.Close() })
		testInspect(t, sp)
		perSec := mustRate(5, time.Second)
		d := cascade.Debit{Key: inspectKey, Limit: "rps", Bucket: perSec, Amount: 2 * tokenbucket.PerToken, Op: cascade.Consume}
		if dec, err := sp.Acquire(t.Context(), &cascade.Plan{Debits: []cascade.Debit{d}}); err != nil || !dec.Admitted {
			t.Fatalf("Acquire rps = %+v, %v", dec, err)
		}
		if lv, err := sp.PerSecond.Bucket(t.Context(), inspectKey, nil); err != nil || len(lv.Limits) != 1 || lv.Limits[0].Tokens != 3*tokenbucket.PerToken {
			t.Fatalf("per-second store's bucket = %+v, %v, want rps 3", lv, err)
		}
		if _, ok, err := sp.TopUp(t.Context(), inspectKey, "rps", tokenbucket.PerToken, nil); err != nil || !ok {
			t.Fatalf("TopUp rps = %v, %v", ok, err)
		}
		lv, err := sp.Bucket(t.Context(), inspectKey, nil)
		if err != nil || len(lv.Limits) != 2 || lv.Limits[1].Name != "rps" || lv.Limits[1].Tokens != 4*tokenbucket.PerToken || lv.Limits[0].Tokens != 10*tokenbucket.PerToken {
			t.Fatalf("split bucket after a top-up of rps = %+v, %v, want rpm 10 and rps 4", lv, err)
		}
	})
}

func testInspect(t *testing.T, st bucketer) {
	ctx := t.Context()
	limits := map[string]tokenbucket.Limit{"rpm": perMinute}
	lv, err := st.Bucket(ctx, inspectKey, limits)
	if got, stored := tokensOf(t, lv); err != nil || got != 10*tokenbucket.PerToken || stored {
		t.Fatalf("Bucket of a new bucket = %+v, %v, want rpm full, not stored", lv, err)
	}
	if _, ok, err := st.Reset(ctx, inspectKey, limits); err != nil || ok {
		t.Fatalf("Reset of a new bucket = %v, %v, want nothing reset", ok, err)
	}
	if _, ok, err := st.TopUp(ctx, inspectKey, "rpm", 1, limits); err != nil || ok {
		t.Fatalf("TopUp of a new bucket = %v, %v, want nothing credited (full)", ok, err)
	}
	if _, _, err := st.TopUp(ctx, inspectKey, "nope", 1, limits); !errors.Is(err, redisstore.ErrNoSuchLimit) {
		t.Fatalf("TopUp of a limit not held = %v, want ErrNoSuchLimit", err)
	}
	if !acquire(t, st, perMinute, 3500) {
		t.Fatal("3.5 of a new bucket refused")
	}
	for range 2 { // a read consumes nothing
		if lv, err = st.Bucket(ctx, inspectKey, nil); err != nil {
			t.Fatal(err)
		}
		if got, stored := tokensOf(t, lv); got != 6500 || !stored || lv.Limits[0].Limit != perMinute || lv.Limits[0].FullIn != 21*time.Second {
			t.Fatalf("Bucket after 3.5 = %+v, want 6.5 stored, full in 21s", lv)
		}
	}
	// Under another limit, the level is restated as a decision would.
	if lv, err = st.Bucket(ctx, inspectKey, map[string]tokenbucket.Limit{"rpm": perHour}); err != nil {
		t.Fatal(err)
	}
	if got, _ := tokensOf(t, lv); got != 6500 || lv.Limits[0].Limit != perHour {
		t.Fatalf("Bucket under 60/h = %+v, want 6.5 under 60/h", lv)
	}
	before, ok, err := st.TopUp(ctx, inspectKey, "rpm", 2000, limits)
	if got, _ := tokensOf(t, before); err != nil || !ok || got != 6500 {
		t.Fatalf("TopUp 2 = %+v, %v, %v, want topped up from 6.5", before, ok, err)
	}
	if acquire(t, st, perMinute, 8501) || !acquire(t, st, perMinute, 8500) {
		t.Fatal("after a top-up of 2: 8.501 admitted or 8.5 refused")
	}
	if _, ok, err := st.TopUp(ctx, inspectKey, "rpm", 100_000, limits); err != nil || !ok {
		t.Fatalf("TopUp 100 = %v, %v", ok, err)
	}
	if lv, _ = st.Bucket(ctx, inspectKey, limits); func() bool { got, _ := tokensOf(t, lv); return got != 10*tokenbucket.PerToken }() {
		t.Fatalf("Bucket after a top-up past capacity = %+v, want 10: never above capacity", lv)
	}
	if !acquire(t, st, perMinute, 9000) {
		t.Fatal("9 refused")
	}
	before, ok, err = st.Reset(ctx, inspectKey, limits)
	if got, _ := tokensOf(t, before); err != nil || !ok || got != 1000 {
		t.Fatalf("Reset = %+v, %v, %v, want reset from 1", before, ok, err)
	}
	if acquire(t, st, perMinute, 10_001) || !acquire(t, st, perMinute, 10_000) {
		t.Fatal("after a reset: 10.001 admitted or 10 refused")
	}
	if before, ok, err := st.Reset(ctx, inspectKey, limits); err != nil || !ok || before.Limits[0].Tokens != 0 {
		t.Fatalf("Reset of an empty bucket = %+v, %v, %v, want reset from 0", before, ok, err)
	}
	if lv, err = st.Bucket(ctx, inspectKey, nil); err != nil || len(lv.Limits) != 1 || !lv.Limits[0].Stored || lv.Limits[0].Tokens != 10*tokenbucket.PerToken {
		t.Fatalf("Bucket after a reset = %+v, %v, want rpm stored, full", lv, err)
	}
}

// TestTopUpRacesDecisions: top-ups and resets made while decisions drain
// the bucket are exact: on a clock that does not move, what the decisions
// admit is the capacity plus what each top-up and reset reports it added
// (capacity less what the bucket held, at most the amount).
func TestTopUpRacesDecisions(t *testing.T) {
	now := time.UnixMilli(1_800_000_000_000)
	st := redisstore.New(server(t), redisstore.Config{Now: func() time.Time { return now }, Timeout: time.Second})
	t.Cleanup(func() { _ = st.Close() })
	ctx := t.Context()
	var admitted atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				d := cascade.Debit{Key: inspectKey, Limit: "rpm", Bucket: perMinute, Amount: tokenbucket.PerToken, Op: cascade.Consume}
				dec, err := st.Acquire(ctx, &cascade.Plan{Debits: []cascade.Debit{d}})
				if err != nil {
					t.Error(err)
					return
				}
				if dec.Admitted {
					admitted.Add(1)
				}
			}
		}()
	}
	credited := tokenbucket.Millitokens(0)
	for i := range 40 {
		if i%10 == 9 {
			before, ok, err := st.Reset(ctx, inspectKey, nil)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				credited += perMinute.Capacity - before.Limits[0].Tokens
			}
			continue
		}
		before, ok, err := st.TopUp(ctx, inspectKey, "rpm", tokenbucket.PerToken, map[string]tokenbucket.Limit{"rpm": perMinute})
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			credited += min(tokenbucket.PerToken, perMinute.Capacity-before.Limits[0].Tokens)
		}
	}
	close(stop)
	wg.Wait()
	for acquire(t, st, perMinute, tokenbucket.PerToken) {
		admitted.Add(1)
	}
	if want := (perMinute.Capacity + credited) / tokenbucket.PerToken; admitted.Load() != int64(want) {
		t.Errorf("admitted %d, want the capacity and what the top-ups and resets added: %d", admitted.Load(), want)
	}
	t.Logf("admitted %d, of which %d credited", admitted.Load(), credited/tokenbucket.PerToken)
}
