package dynamo

import (
	"context"
	"fmt"
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
// of its own, not any caller's; the read carries the values of from (the
// starter's context, see WithCallContext).
func (s *Store) fly(keys []string, from context.Context, read func(ctx context.Context, keys []string, f *flight) error) []*flight {
	s.loads.mu.Lock()
	defer s.loads.mu.Unlock()
	if s.closed.Load() {
		f := &flight{done: make(chan struct{}), err: errClosed}
		close(f.done)
		return []*flight{f}
	}
	var out []*flight
	var start []string
	f := &flight{start: time.Now(), done: make(chan struct{})}
	for _, k := range keys {
		if g, ok := s.loads.m[k]; ok {
			out = append(out, g)
			continue
		}
		s.loads.m[k] = f
		start = append(start, k)
	}
	if len(start) == 0 {
		return out
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithTimeout(s.life, s.flightTimeout())
		defer cancel()
		f.err = read(s.callContext(ctx, []context.Context{from}), start, f)
		s.loads.mu.Lock()
		for _, k := range start {
			delete(s.loads.m, k)
		}
		s.loads.mu.Unlock()
		close(f.done)
	}()
	return append(out, f)
}
