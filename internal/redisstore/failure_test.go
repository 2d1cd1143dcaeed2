package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/internal/redisstore"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

func oneToken(entity string) *cascade.Plan {
	l, _ := tokenbucket.Rate(10, time.Second, 100)
	return &cascade.Plan{Debits: []cascade.Debit{{Key: cascade.Key{Entity: entity, Resource: "api"}, Limit: "l", Bucket: l, Amount: tokenbucket.PerToken}}}
}

// TestFrozenRedis: with redis-server stopped (SIGSTOP), 500 concurrent
// plans on one hot key and on new keys each fail as unavailable, none
// admitted: the store answers them itself (a caller's own deadline, 2 s,
// would be another error), and they leave no goroutine behind; once it
// runs again, plans are decided. (How soon each fails is logged: within a
// few budgets of 50 ms on an idle machine.)
func TestFrozenRedis(t *testing.T) {
	c, proc := serverProc(t)
	calls := &countCalls{n: map[string]int{}}
	s := redisstore.New(c, redisstore.Config{Timeout: 50 * time.Millisecond, MaxInFlight: 8, Observer: calls})
	t.Cleanup(func() { _ = s.Close() })
	// Before the freeze, the store's first call (the dial, the script's
	// load, the stored limits' read) may take longer than the 50 ms budget
	// on a busy machine (a clean clone's run under -race saw it time out):
	// tried until admitted, within 5 s.
	admittedWithin(t, s, "before the freeze")
	before := runtime.NumGoroutine()
	proc.Freeze()
	thawed := false
	thaw := func() {
		if !thawed {
			proc.Thaw()
			thawed = true
		}
	}
	t.Cleanup(thaw)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var admitted, unavailable, other int
	var slowest time.Duration
	for i := range 500 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			p := oneToken("hot")
			if i%2 == 1 {
				p = oneToken(fmt.Sprint("new-", i))
			}
			start := time.Now()
			dec, err := s.Acquire(ctx, p)
			took := time.Since(start)
			mu.Lock()
			defer mu.Unlock()
			slowest = max(slowest, took)
			switch {
			case err == nil && dec.Admitted:
				admitted++
			case errors.Is(err, redisstore.ErrUnavailable) || errors.Is(err, cascade.ErrContended):
				unavailable++
			default:
				other++
			}
		})
	}
	wg.Wait()
	t.Logf("frozen: %d admitted, %d unavailable, %d other; slowest answer %v; goroutines %d before, %d after", admitted, unavailable, other, slowest, before, runtime.NumGoroutine())
	if admitted != 0 || other != 0 {
		t.Errorf("frozen Redis: %d admitted and %d other answers, want every plan unavailable", admitted, other)
	}
	if got := calls.get(); got[redisstore.CallOK] != 1 || got[redisstore.CallTimeout] == 0 {
		t.Errorf("calls observed %v, want the one before the freeze ok and the others timed out (or busy)", got)
	}
	thaw()
	admittedWithin(t, s, "after the thaw")
	time.Sleep(100 * time.Millisecond)
	if n := runtime.NumGoroutine(); n > before+4 {
		t.Errorf("%d goroutines after the freeze, %d before", n, before)
	}
}

// TestNotAttached: a store whose Redis has not answered yet fails each
// plan as unavailable after its budget, never admitted.
func TestNotAttached(t *testing.T) {
	s := redisstore.Open(redisstore.Config{Timeout: 30 * time.Millisecond})
	t.Cleanup(func() { _ = s.Close() })
	start := time.Now()
	dec, err := s.Acquire(context.Background(), oneToken("a"))
	if !errors.Is(err, redisstore.ErrUnavailable) || dec.Admitted {
		t.Errorf("Acquire() = %+v, %v; want ErrUnavailable", dec, err)
	}
	if took := time.Since(start); took < 30*time.Millisecond || took > time.Second {
		t.Errorf("Acquire() answered after %v, want after its budget of 30 ms", took)
	}
}

// countCalls is an Observer counting calls by outcome.
type countCalls struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *countCalls) Call(outcome string, _ int, _ time.Duration) {
	c.mu.Lock()
	c.n[outcome]++
	c.mu.Unlock()
}

func (c *countCalls) get() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, v := range c.n {
		out[k] = v
	}
	return out
}

// TestFullLaneRefusesAsBusy: with Redis frozen and a key's lane full, a
// decision on the key is refused as busy (cascade.Busy: no error, so never
// ON_UNAVAILABLE, which may admit), never admitted.
func TestFullLaneRefusesAsBusy(t *testing.T) {
	c, proc := serverProc(t)
	redisstore.SetMaxQueue(t, 2)
	s := redisstore.New(c, redisstore.Config{Timeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = s.Close() })
	if _, err := s.Acquire(context.Background(), oneToken("hot")); err != nil { // stored limits cached
		t.Fatal(err)
	}
	proc.Freeze()
	t.Cleanup(proc.Thaw)
	var wg sync.WaitGroup
	var mu sync.Mutex
	busy := 0
	for range 20 {
		wg.Go(func() {
			dec, err := s.Acquire(context.Background(), oneToken("hot"))
			if err == nil {
				mu.Lock()
				defer mu.Unlock()
				if dec.Admitted || !dec.Statuses[0].Contended {
					t.Errorf("a decision with the lane full: %+v, want refused as busy", dec)
				}
				busy++
			}
		})
	}
	wg.Wait()
	if busy == 0 {
		t.Error("no decision was refused as busy with 20 waiting on a lane of 2")
	}
}

// admittedWithin tries a decision on the hot key every 10 ms until one is
// admitted, and fails t (saying when) if none is within 5 s.
func admittedWithin(t *testing.T, s *redisstore.Store, when string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; {
		dec, err := s.Acquire(context.Background(), oneToken("hot"))
		if err == nil && dec.Admitted {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %+v, %v", when, dec, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
