package storetest

import (
	"sync"
	"time"
)

// Clock is a settable clock for stores under test. It is safe for concurrent
// use; the zero Clock reads the zero time.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a clock that reads t until it is moved.
func NewClock(t time.Time) *Clock {
	return &Clock{t: t}
}

// Now returns the clock's time. Pass c.Now to a store as its time source.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock by d (backwards when d is negative).
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// Set moves the clock to t, which may be earlier than its time.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}
