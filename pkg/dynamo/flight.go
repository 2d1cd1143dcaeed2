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
	// records coalesces the reads of stored records (guarded by mu).
	records batcher
}

// batcher lets at most maxRunning reads of one kind run at once; the keys
// asked for meanwhile wait in one next read, started when a running one
// ends. At low load a read starts at once, as a flight does; under a flood
// of new keys, the reads that would each have been a call carry their keys
// together (a BatchGetItem of up to 100 keys), so the table is asked once
// for many decisions instead of once for each.
type batcher struct {
	running int
	next    *flight
	keys    []string
	// decisions are the contexts of the decisions that put keys in next.
	decisions []context.Context
}

// maxRunning is how many reads of stored records run at once per store.
const maxRunning = 4

type flight struct {
	start time.Time
	done  chan struct{}
	// queued: the read waits in a batcher for a running one to end; its
	// waiters whose budgets end meanwhile were held up by reads of this
	// replica, not by DynamoDB (guarded by flights.mu).
	queued    bool
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
func (s reader) wait(ctx context.Context, f *flight) error {
	select {
	case <-f.done:
		return f.err
	case <-ctx.Done():
		s.reads.mu.Lock()
		queued, start := f.queued, f.start
		s.reads.mu.Unlock()
		if !queued && !f.throttled.Load() && time.Since(start) >= s.cfg.Timeout {
			return fmt.Errorf("dynamo: read not answered within %v: %w: %w", s.cfg.Timeout, ErrUnavailable, ctx.Err())
		}
		if f.throttled.Load() && s.cfg.ThrottleFails {
			return errThrottledItem
		}
		return errContended
	}
}

// flightTimeout bounds a read that fills a cache: it outlives the
// decisions that wait for it, so that the cache fills even when they gave
// up.
func (s reader) flightTimeout() time.Duration { return max(s.cfg.Timeout, time.Second) }

// fly returns the flights reading keys, starting one read (read, on the
// keys no flight is reading yet) under the store's lifetime and a deadline
// of its own, not any caller's. The read's context derives from the
// decisions that start it (see WithCallContext); a flight already reading
// a key is told of the decisions that join it (see WithCallJoin). No hook
// runs while a lock is held, and a hook or a read that panics fails the
// read (and its waiters) instead of the process.
func (s reader) fly(keys []string, decisions []context.Context, read func(ctx context.Context, keys []string, f *flight) error) []*flight {
	s.reads.mu.Lock()
	if s.closed.Load() {
		s.reads.mu.Unlock()
		f := &flight{done: make(chan struct{}), err: errClosed}
		close(f.done)
		return []*flight{f}
	}
	var out, joined, tell []*flight
	var start []string
	f := &flight{start: time.Now(), done: make(chan struct{})}
	for _, k := range keys {
		if g, ok := s.reads.m[k]; ok {
			out = append(out, g)
			joinFlight(g, decisions, &joined, &tell)
			continue
		}
		s.reads.m[k] = f
		start = append(start, k)
	}
	if len(start) > 0 {
		s.wg.Add(1) // under the lock: Close waits for the read
	}
	s.reads.mu.Unlock()
	for _, g := range tell {
		s.tellJoins(g.join, decisions)
	}
	if len(start) == 0 {
		return out
	}
	ctx, cancel := s.prepare(f, decisions)
	go s.runRead(f, start, ctx, cancel, read)
	return append(out, f)
}

// joinFlight notes, under flights.mu, that decisions wait for g, which
// reads a key they need: once per flight (seen), as pending while g's
// context is not made yet, or else to be told of through g's join
// function (tell, after the lock is released).
func joinFlight(g *flight, decisions []context.Context, seen, tell *[]*flight) {
	if slices.Contains(*seen, g) {
		return
	}
	*seen = append(*seen, g)
	switch {
	case !g.ready:
		g.pending = append(g.pending, decisions...)
	case g.join != nil:
		*tell = append(*tell, g)
	}
}

// flyRecords is fly for reads of stored records (read), coalesced by the
// store's batcher: while maxRunning reads run, keys that no flight reads
// yet join the next read, which starts when a running one ends.
func (s reader) flyRecords(keys []string, decisions []context.Context, read func(ctx context.Context, keys []string, f *flight) error) []*flight {
	s.reads.mu.Lock()
	b := &s.reads.records
	if s.closed.Load() || b.running < maxRunning {
		s.reads.mu.Unlock()
		return s.fly(keys, decisions, s.counted(read))
	}
	var out []*flight
	var tell []*flight
	for _, k := range keys {
		if g, ok := s.reads.m[k]; ok {
			joinFlight(g, decisions, &out, &tell)
			continue
		}
		if b.next == nil {
			b.next = &flight{start: time.Now(), done: make(chan struct{}), queued: true}
			b.decisions = append([]context.Context(nil), decisions...)
		} else if !slices.Contains(out, b.next) {
			b.decisions = append(b.decisions, decisions...)
		}
		s.reads.m[k] = b.next
		b.keys = append(b.keys, k)
		if !slices.Contains(out, b.next) {
			out = append(out, b.next)
		}
	}
	s.reads.mu.Unlock()
	for _, g := range tell {
		s.tellJoins(g.join, decisions)
	}
	return out
}

// counted wraps a read of stored records so that the batcher counts it
// while it runs, and starts the next read when it ends.
func (s reader) counted(read func(ctx context.Context, keys []string, f *flight) error) func(ctx context.Context, keys []string, f *flight) error {
	return func(ctx context.Context, keys []string, f *flight) error {
		s.reads.mu.Lock()
		s.reads.records.running++
		s.reads.mu.Unlock()
		defer s.startNext(read)
		return read(ctx, keys, f)
	}
}

// startNext ends a running read of stored records and starts the next one,
// if keys wait for it: under the same lifetime, deadline and hooks as fly's
// reads, for every decision that put keys in it. After Close the waiting
// read fails with errClosed.
func (s reader) startNext(read func(ctx context.Context, keys []string, f *flight) error) {
	s.reads.mu.Lock()
	b := &s.reads.records
	b.running--
	f, keys, decisions := b.next, b.keys, b.decisions
	b.next, b.keys, b.decisions = nil, nil, nil
	if f == nil {
		s.reads.mu.Unlock()
		return
	}
	f.queued = false
	f.start = time.Now()
	if s.closed.Load() {
		for _, k := range keys {
			delete(s.reads.m, k)
		}
		s.reads.mu.Unlock()
		f.err = errClosed
		close(f.done)
		return
	}
	s.wg.Add(1) // under the lock: Close waits for the read
	s.reads.mu.Unlock()
	go func() {
		ctx, cancel := s.prepare(f, decisions)
		s.runRead(f, keys, ctx, cancel, s.counted(read))
	}()
}

// prepare makes the context of flight f's read, for the decisions that
// started it, under the store's lifetime and a deadline of its own (see
// WithCallContext), and tells the decisions that joined it meanwhile (see
// WithCallJoin). No lock is held while the hooks run.
func (s reader) prepare(f *flight, decisions []context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(s.life, s.flightTimeout())
	ctx = s.callContext(ctx, decisions)
	join := joinOf(ctx)
	s.reads.mu.Lock()
	f.ready, f.join = true, join
	pending := f.pending
	f.pending = nil
	s.reads.mu.Unlock()
	if join != nil {
		s.tellJoins(join, pending)
	}
	return ctx, cancel
}

// runRead runs flight f's read of keys on ctx, recovering a panic, and ends
// the flight. The caller has counted it in s.wg.
func (s reader) runRead(f *flight, keys []string, ctx context.Context, cancel context.CancelFunc, read func(ctx context.Context, keys []string, f *flight) error) {
	defer s.wg.Done()
	defer cancel()
	defer func() {
		if r := recover(); r != nil {
			// A panic is a defect here, not DynamoDB failing to
			// answer: the decisions waiting are refused as
			// contended, never handed to ON_UNAVAILABLE.
			s.log.WithField("panic", fmt.Sprint(r)).Error("a read panicked; the decisions waiting for it are refused")
			f.err = fmt.Errorf("dynamo: read of %d keys panicked: %v: %w", len(keys), r, errContended)
		}
		s.reads.mu.Lock()
		for _, k := range keys {
			delete(s.reads.m, k)
		}
		s.reads.mu.Unlock()
		close(f.done)
	}()
	f.err = read(ctx, keys, f)
}

// recoverHook, deferred around a hook (name) the store runs, recovers a
// panic of the hook: it logs it and calls then.
func (s reader) recoverHook(name string, then func()) {
	if r := recover(); r != nil {
		s.log.WithFields(map[string]any{"hook": name, "panic": fmt.Sprint(r)}).Error("a hook panicked")
		then()
	}
}

// tellJoins tells join of each of decisions; a join that panics is
// logged and not told of the others.
func (s reader) tellJoins(join func(decision context.Context), decisions []context.Context) {
	defer s.recoverHook("call-join", func() {})
	for _, d := range decisions {
		join(d)
	}
}

// reader runs the shared reads of items and records in flight (flight.go).
type reader struct{ *Store }
