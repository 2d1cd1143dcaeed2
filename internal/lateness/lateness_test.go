package lateness_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dynalimit/dynalimit/internal/lateness"
)

// rig runs a meter whose sleeps last what they are asked plus extra(),
// inside a synctest bubble, and records what it observes.
type rig struct {
	m     *lateness.Meter
	extra atomic.Int64 // ns added to each sleep
	mu    sync.Mutex
	seen  []time.Duration
}

func start(t *testing.T) *rig {
	t.Helper()
	r := &rig{}
	r.m = lateness.New(0, func(d time.Duration) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.seen = append(r.seen, d)
	})
	r.m.SetSleep(func(ctx context.Context, d time.Duration) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d + time.Duration(r.extra.Load())):
			return true
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = r.m.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return r
}

func (r *rig) last() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.seen) == 0 {
		return -1
	}
	return r.seen[len(r.seen)-1]
}

// TestOnTime: a process that wakes when it asked is not late.
func TestOnTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := start(t)
		time.Sleep(time.Second)
		synctest.Wait()
		if got := r.last(); got != 0 {
			t.Errorf("observed %v, want 0", got)
		}
		if r.m.Recent() != 0 || r.m.Late(15*time.Millisecond) {
			t.Errorf("Recent %v, Late(15ms) %v; want 0, false", r.m.Recent(), r.m.Late(15*time.Millisecond))
		}
	})
}

// TestLateThenOnTimeAgain: waking 5 ms late is observed as such, is late
// for a budget of 15 ms but not of 40 ms, and is forgotten within two
// seconds of ending.
func TestLateThenOnTimeAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := start(t)
		r.extra.Store(int64(5 * time.Millisecond))
		time.Sleep(500 * time.Millisecond)
		synctest.Wait()
		if got := r.last(); got != 5*time.Millisecond {
			t.Errorf("observed %v, want 5ms", got)
		}
		if !r.m.Late(15*time.Millisecond) || r.m.Late(40*time.Millisecond) {
			t.Errorf("Recent %v: Late(15ms) %v, Late(40ms) %v; want true, false", r.m.Recent(), r.m.Late(15*time.Millisecond), r.m.Late(40*time.Millisecond))
		}
		r.extra.Store(0)
		time.Sleep(2100 * time.Millisecond)
		synctest.Wait()
		if got := r.m.Recent(); got != 0 {
			t.Errorf("Recent %v two seconds after on time again, want 0", got)
		}
	})
}

// TestOverdue: while the meter has not woken yet, how overdue it is
// counts: a process stalled now is late now, before it wakes to say so.
func TestOverdue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := start(t)
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		r.extra.Store(int64(time.Second))
		time.Sleep(300 * time.Millisecond) // the sleep under way ends on time; the next is overdue
		synctest.Wait()
		if got := r.m.Recent(); got < 250*time.Millisecond {
			t.Errorf("Recent %v while 290 ms overdue, want about that", got)
		}
		r.extra.Store(0)
	})
}

// TestNil: a nil meter measures nothing and is never late.
func TestNil(t *testing.T) {
	var m *lateness.Meter
	if m.Recent() != 0 || m.Late(time.Millisecond) {
		t.Error("a nil meter is late")
	}
}
