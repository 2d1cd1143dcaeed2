package dynamo

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// flights holds the reads in progress, one per key: every decision that
// needs a record or bucket image being read waits for the same read.
type flights struct {
	mu sync.Mutex
	m  map[string]*flight
}

type flight struct {
	start     time.Time
	done      chan struct{}
	err       error
	throttled atomic.Bool // DynamoDB throttled the read at least once

	// Guarded by flights.mu. The read's context is made by the decision
	// that starts it, outside the lock (WithCallContext's hook is the
	// caller's code); until it is made (ready), the decisions that join
	// wait in pending to be told of. join, when set, is told of each
	// decision that waits for the read without having started it (see
	// WithCallJoin).
	ready   bool
	join    func(decision context.Context)
	pending []context.Context
}

// wait waits for f within ctx. A caller whose budget ends first is told
// why: the read has been running for a whole budget (DynamoDB did not
// answer in time: ErrUnavailable), or the caller joined it late or
// DynamoDB throttled it (errContended: its budget went on waiting for its
// own keys).
func (s *Store) wait(ctx context.Context, f *flight) error {
	select {
	case <-f.done:
		return f.err
	case <-ctx.Done():
		if !f.throttled.Load() && time.Since(f.start) >= s.cfg.Timeout {
			return fmt.Errorf("dynamo: read not answered within %v: %w: %w", s.cfg.Timeout, ErrUnavailable, ctx.Err())
		}
		return errContended
	}
}

// flightTimeout bounds a read that fills a cache: it outlives the
// decisions that wait for it, so that the cache fills even when they gave
// up.
func (s *Store) flightTimeout() time.Duration { return max(s.cfg.Timeout, time.Second) }

// fly returns the flights reading keys, starting one read (read, on the
// keys no flight is reading yet) under the store's lifetime and a deadline
// of its own, not any caller's. The read's context derives from the
// decisions that start it (see WithCallContext); a flight already reading
// a key is told of the decisions that join it (see WithCallJoin). No hook
// runs while a lock is held, and a hook or a read that panics fails the
// read (and its waiters) instead of the process.
func (s *Store) fly(keys []string, decisions []context.Context, read func(ctx context.Context, keys []string, f *flight) error) []*flight {
	s.loads.mu.Lock()
	if s.closed.Load() {
		s.loads.mu.Unlock()
		f := &flight{done: make(chan struct{}), err: errClosed}
		close(f.done)
		return []*flight{f}
	}
	var out, joined, tell []*flight
	var start []string
	f := &flight{start: time.Now(), done: make(chan struct{})}
	for _, k := range keys {
		if g, ok := s.loads.m[k]; ok {
			out = append(out, g)
			if !slices.Contains(joined, g) {
				joined = append(joined, g)
				switch {
				case !g.ready:
					g.pending = append(g.pending, decisions...)
				case g.join != nil:
					tell = append(tell, g)
				}
			}
			continue
		}
		s.loads.m[k] = f
		start = append(start, k)
	}
	if len(start) > 0 {
		s.wg.Add(1) // under the lock: Close waits for the read
	}
	s.loads.mu.Unlock()
	for _, g := range tell {
		s.tellJoins(g.join, decisions)
	}
	if len(start) == 0 {
		return out
	}
	ctx, cancel := context.WithTimeout(s.life, s.flightTimeout())
	ctx = s.callContext(ctx, decisions)
	join := joinOf(ctx)
	s.loads.mu.Lock()
	f.ready, f.join = true, join
	pending := f.pending
	f.pending = nil
	s.loads.mu.Unlock()
	if join != nil {
		s.tellJoins(join, pending)
	}
	go func() {
		defer s.wg.Done()
		defer cancel()
		defer func() {
			if r := recover(); r != nil {
				// A panic is a defect here, not DynamoDB failing to
				// answer: the decisions waiting are refused as
				// contended, never handed to ON_UNAVAILABLE.
				s.log.WithField("panic", fmt.Sprint(r)).Error("a read panicked; the decisions waiting for it are refused")
				f.err = fmt.Errorf("dynamo: read of %d keys panicked: %v: %w", len(start), r, errContended)
			}
			s.loads.mu.Lock()
			for _, k := range start {
				delete(s.loads.m, k)
			}
			s.loads.mu.Unlock()
			close(f.done)
		}()
		f.err = read(ctx, start, f)
	}()
	return append(out, f)
}

// recoverHook, deferred around a hook (name) the store runs, recovers a
// panic of the hook: it logs it and calls then.
func (s *Store) recoverHook(name string, then func()) {
	if r := recover(); r != nil {
		s.log.WithFields(map[string]any{"hook": name, "panic": fmt.Sprint(r)}).Error("a hook panicked")
		then()
	}
}

// tellJoins tells join of each of decisions; a join that panics is
// logged and not told of the others.
func (s *Store) tellJoins(join func(decision context.Context), decisions []context.Context) {
	defer s.recoverHook("call-join", func() {})
	for _, d := range decisions {
		join(d)
	}
}
