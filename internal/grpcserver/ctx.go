package grpcserver

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// deadlineCtx is a call's context when the call carries a grpc-timeout.
// context.WithDeadline starts a timer for every call; most calls here end
// in microseconds and never ask for Done, so the timer starts only when
// Done is first called. Err and Deadline need no timer.
type deadlineCtx struct {
	context.Context // the connection's
	deadline        time.Time

	once   sync.Once
	timed  context.Context // with the deadline, once Done was called
	cancel context.CancelFunc
	ended  atomic.Bool // the call has ended: canceled, as in grpc-go
}

// endedCtx is the Done of a call that ended before anyone asked for it.
var endedCtx = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

func newDeadlineCtx(parent context.Context, d time.Duration) *deadlineCtx {
	return &deadlineCtx{Context: parent, deadline: time.Now().Add(d)}
}

// reset makes c a new call's context.
func (c *deadlineCtx) reset(parent context.Context, d time.Duration) {
	c.Context, c.deadline = parent, time.Now().Add(d)
	c.once = sync.Once{}
	c.timed, c.cancel = nil, nil
	c.ended.Store(false)
}

func (c *deadlineCtx) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *deadlineCtx) Done() <-chan struct{} {
	c.once.Do(func() { c.timed, c.cancel = context.WithDeadline(c.Context, c.deadline) })
	return c.timed.Done()
}

// AfterFunc runs f once c is done, as context.AfterFunc does, without a
// goroutine: a context a handler derives from its call's (WithTimeout,
// WithCancel) registers with a context of the standard library instead of
// leaving a goroutine that watches this one, which is recycled once the
// call has ended.
func (c *deadlineCtx) AfterFunc(f func()) (stop func() bool) {
	c.Done()
	return context.AfterFunc(c.timed, f)
}

func (c *deadlineCtx) Err() error {
	if err := c.Context.Err(); err != nil {
		return err
	}
	if c.ended.Load() {
		return context.Canceled
	}
	if !time.Now().Before(c.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

// release ends the call: Done is closed from now on, and the timer, if
// Done started one, is stopped.
func (c *deadlineCtx) release() {
	c.ended.Store(true)
	c.once.Do(func() { c.timed = endedCtx })
	if c.cancel != nil {
		c.cancel()
	}
}
