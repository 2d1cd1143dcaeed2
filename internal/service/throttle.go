package service

import (
	"sync/atomic"
	"time"
)

// throttle lets one event through per interval and counts the rest. The zero
// value is ready; it is safe for concurrent use.
type throttle struct {
	last       atomic.Int64 // unix nanoseconds of the last event let through
	suppressed atomic.Int64
}

// allow reports whether an event at now may be logged, and how many events
// were suppressed since the last one that was.
func (t *throttle) allow(now time.Time, every time.Duration) (bool, int64) {
	last := t.last.Load()
	if now.UnixNano()-last < int64(every) || !t.last.CompareAndSwap(last, now.UnixNano()) {
		t.suppressed.Add(1)
		return false, 0
	}
	return true, t.suppressed.Swap(0)
}
