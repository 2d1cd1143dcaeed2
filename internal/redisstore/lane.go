package redisstore

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dynalimit/dynalimit/pkg/cascade"
)

// A lane is the queue of one key (a plan's first bucket): while a call of
// the script for it is in flight, the plans that arrive wait, and the next
// call takes them all (up to maxBatch), so that the decisions waiting on
// one hot item share one round trip. Lanes are made on demand and dropped
// when idle.
type lane struct {
	queue []*job
	busy  bool // a runner serves it
}

// lanes holds the store's lanes under one lock: its holds are short.
type lanes struct {
	mu sync.Mutex
	m  map[string]*lane
}

// maxBatch bounds the plans of one call.
const maxBatch = 64

// maxQueue bounds the plans waiting in one lane: past it a decision is
// refused as busy at once (cascade.Busy; a settlement or a repayment
// fails, to be retried): a hung Redis does not grow memory. (A variable
// for the tests.)
var maxQueue = 4096

// errQueueFull is the refusal of a plan whose lane is full.
var errQueueFull = fmt.Errorf("redisstore: %d plans wait on one key: %w", maxQueue, cascade.ErrContended)

// submit queues j on key's lane, starting its runner when the lane is
// idle, and waits for j's answer or ctx's end. A job whose call was sent
// and not answered before ctx ended may have landed.
func (s *Store) submit(ctx context.Context, key string, j *job) error {
	j.done = make(chan struct{})
	s.lanes.mu.Lock()
	ln := s.lanes.m[key]
	if ln == nil {
		ln = &lane{}
		s.lanes.m[key] = ln
	}
	if len(ln.queue) >= maxQueue {
		s.lanes.mu.Unlock()
		return errQueueFull
	}
	ln.queue = append(ln.queue, j)
	start := !ln.busy
	ln.busy = true
	s.lanes.mu.Unlock()
	if start {
		s.wg.Add(1)
		go s.run(key, ln)
	}
	select {
	case <-j.done:
		return j.err
	case <-ctx.Done():
		if j.state.CompareAndSwap(queued, dropped) {
			return fmt.Errorf("redisstore: %w", ctx.Err()) // never sent
		}
		return fmt.Errorf("redisstore: %w: %w", cascade.ErrMayHaveLanded, ctx.Err())
	}
}

// Job states: a queued job is sent by its lane's runner unless its caller
// dropped it first.
const (
	queued int32 = iota
	sent
	dropped
)

// jobState is a job's state, shared by its caller and its lane's runner.
type jobState = atomic.Int32

// run serves ln until its queue is empty, one call per batch. Between
// calls it yields once, so that the decisions whose callers are running
// join the next batch rather than each waiting for a call of its own.
func (s *Store) run(key string, ln *lane) {
	defer s.wg.Done()
	for first := true; ; first = false {
		if !first {
			runtime.Gosched()
		}
		s.lanes.mu.Lock()
		n := min(len(ln.queue), maxBatch)
		if n == 0 {
			ln.busy = false
			delete(s.lanes.m, key)
			s.lanes.mu.Unlock()
			return
		}
		batch := make([]*job, 0, n)
		for _, j := range ln.queue[:n] {
			if j.state.CompareAndSwap(queued, sent) {
				batch = append(batch, j)
			}
		}
		ln.queue = append(ln.queue[:0], ln.queue[n:]...)
		s.lanes.mu.Unlock()
		if len(batch) > 0 {
			s.call(batch)
		}
	}
}

// call runs one batch within the store's budget, under its bound on calls
// in flight, and answers each job.
func (s *Store) call(batch []*job) {
	start := time.Now()
	err := s.acquireSlot()
	outcome := CallBusy
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Timeout)
		err = s.exec(ctx, batch)
		cancel()
		s.releaseSlot()
		outcome = callOutcome(err)
		err = classify(err)
	}
	s.cfg.Observer.Call(outcome, len(batch), time.Since(start))
	for _, j := range batch {
		j.err = err
		close(j.done)
	}
}

// acquireSlot takes one of the store's calls in flight (Config.MaxInFlight),
// waiting at most the store's budget for one.
func (s *Store) acquireSlot() error {
	select {
	case s.slots <- struct{}{}:
		return nil
	case <-s.closed:
		return ErrClosed
	default:
	}
	t := time.NewTimer(s.cfg.Timeout)
	defer t.Stop()
	select {
	case s.slots <- struct{}{}:
		return nil
	case <-t.C:
		return fmt.Errorf("redisstore: %d calls in flight for %v: %w", cap(s.slots), s.cfg.Timeout, ErrUnavailable)
	case <-s.closed:
		return ErrClosed
	}
}

func (s *Store) releaseSlot() { <-s.slots }

// ErrClosed is the answer of a store that was closed.
var ErrClosed = errors.New("redisstore: closed")

// callOutcome is the Observer's name of a call's error.
func callOutcome(err error) string {
	switch {
	case err == nil:
		return CallOK
	case errors.Is(err, context.DeadlineExceeded):
		return CallTimeout
	}
	return CallError
}
