package lateness

import (
	"context"
	"sync/atomic"
	"time"
)

// DefaultInterval is how long the meter asks to sleep.
const DefaultInterval = 10 * time.Millisecond

// window is how long the largest lateness is kept: Recent covers the last
// one to two windows.
const window = time.Second

// lateShare: a process is late for a budget when its recent lateness is a
// quarter of the budget or more.
const lateShare = 4

// Meter measures this process's lateness while Run runs. Its methods are
// safe for concurrent use, and on a nil Meter (which measures nothing).
type Meter struct {
	interval time.Duration
	observe  func(late time.Duration)
	// sleep waits d or until ctx ends (false then).
	sleep func(ctx context.Context, d time.Duration) bool
	// due is when the sleeping goroutine is due to wake (unix ns; 0 while
	// Run is not running).
	due atomic.Int64
	// recent is the most it woke late over the current and the last
	// window (ns).
	recent atomic.Int64
}

// New returns a meter that sleeps interval (DefaultInterval when ≤ 0) and
// hands each lateness it measures to observe (nil: to nothing).
func New(interval time.Duration, observe func(late time.Duration)) *Meter {
	if interval <= 0 {
		interval = DefaultInterval
	}
	if observe == nil {
		observe = func(time.Duration) {}
	}
	return &Meter{interval: interval, observe: observe, sleep: sleep}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Run measures until ctx ends, and returns nil.
func (m *Meter) Run(ctx context.Context) error {
	defer func() {
		m.due.Store(0)
		m.recent.Store(0)
	}()
	var cur, prev time.Duration // the most late in the current and the last window
	start := time.Now()
	for {
		due := time.Now().Add(m.interval)
		m.due.Store(due.UnixNano())
		if !m.sleep(ctx, m.interval) {
			return nil
		}
		woke := time.Now()
		late := max(woke.Sub(due), 0)
		m.observe(late)
		cur = max(cur, late)
		if woke.Sub(start) >= window {
			prev, cur, start = cur, 0, woke
		}
		m.recent.Store(int64(max(cur, prev)))
	}
}

// Recent is how late this process ran over the last second or two: the
// most the meter woke later than asked, or how overdue it is now, when
// more. 0 when it is not running.
func (m *Meter) Recent() time.Duration {
	if m == nil {
		return 0
	}
	r := time.Duration(m.recent.Load())
	if due := m.due.Load(); due > 0 {
		r = max(r, time.Duration(time.Now().UnixNano()-due))
	}
	return r
}

// Late reports whether this process ran late recently by a quarter of
// budget or more: a call of that budget that ran out then may have spent
// most of it waiting for this process's CPU, not for the other side.
func (m *Meter) Late(budget time.Duration) bool {
	return m != nil && budget > 0 && m.Recent() >= budget/lateShare
}
