package memstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// LimitLevel is what one limit of a bucket holds, as Inspect and Reset
// read it.
type LimitLevel struct {
	// Name is the limit's name.
	Name string
	// Limit is the limit the level is read with: the one it was last
	// written with, else the one given.
	Limit tokenbucket.Limit
	// Tokens is what the limit holds now, negative in debt.
	Tokens tokenbucket.Millitokens
	// FullIn is how long until the limit is full again.
	FullIn time.Duration
	// Stored reports whether the store holds a level for the limit; a
	// limit without one is full.
	Stored bool
}

// Inspect returns, by name, what key's bucket holds now of every limit the
// store holds a level of, read with the limit it was written with, and of
// every other limit in limits (full). It writes nothing and consumes
// nothing, and a bucket it reads is not counted used by the eviction
// hand. A key naming the store's namespace (WithNamespace) is the key
// naming none.
//
// Cost: the limits of a key are spread over the shards by the hash of
// key and limit name, so Inspect passes over every shard's map, holding
// that shard's lock while it compares keys (as long as Run's sweeper holds
// it), then takes each matching bucket limit's lock to read its level.
func (s *Store) Inspect(ctx context.Context, key cascade.Key, limits map[string]tokenbucket.Limit) ([]LimitLevel, time.Time, error) {
	if err := ctx.Err(); err != nil {
		return nil, time.Time{}, fmt.Errorf("memstore: inspect: %w", err)
	}
	out, now := s.visit(key, limits, nil)
	return out, now, nil
}

// Reset refills every limit key's bucket holds a level of to the capacity
// of the limit it was written with, and returns what the bucket held
// before as Inspect does, and whether anything was refilled (false: no
// level is held, the bucket is full). Each level is refilled under its own
// lock, so a plan deciding on it at once is decided before or after the
// refill, never across it. Cost as Inspect's.
func (s *Store) Reset(ctx context.Context, key cascade.Key, limits map[string]tokenbucket.Limit) ([]LimitLevel, bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, false, fmt.Errorf("memstore: reset: %w", err)
	}
	reset := false
	before, _ := s.visit(key, limits, func(e *entry, nowMs int64) {
		e.state = e.limit.Full(nowMs)
		reset = true
	})
	return before, reset, nil
}

// TopUp credits amount millitokens to the level of the limit named name
// of key's bucket, never above its capacity (for a calendar budget, within
// its current period), and returns what the bucket held before as Inspect
// does, and whether the limit held a level (false: none is held, it is
// full). The credit is made under the level's lock. Cost as Inspect's.
func (s *Store) TopUp(ctx context.Context, key cascade.Key, name string, amount tokenbucket.Millitokens, limits map[string]tokenbucket.Limit) ([]LimitLevel, bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, false, fmt.Errorf("memstore: top up: %w", err)
	}
	credited := false
	before, _ := s.visit(key, limits, func(e *entry, nowMs int64) {
		if e.key.limit != name {
			return
		}
		v := tokenbucket.Stored(e.state)
		e.limit.Refund(&v, amount, nowMs)
		e.state = v.State()
		credited = true
	})
	return before, credited, nil
}

// visit reads key's bucket as Inspect describes, calling then, when set,
// on each stored level after reading it, with its lock held.
func (s *Store) visit(key cascade.Key, limits map[string]tokenbucket.Limit, then func(e *entry, nowMs int64)) ([]LimitLevel, time.Time) {
	if s.namespace != "" && key.Namespace == s.namespace {
		key.Namespace = ""
	}
	entries := s.entriesOf(key)
	nowMs := s.now().UnixMilli()
	byName := map[string]LimitLevel{}
	for name, l := range limits {
		byName[name] = LimitLevel{Name: name, Limit: l, Tokens: l.Capacity}
	}
	for _, e := range entries {
		e.mu.Lock()
		if !e.dead && e.stored {
			byName[e.key.limit] = LimitLevel{
				Name: e.key.limit, Limit: e.limit, Stored: true,
				Tokens: e.limit.Tokens(e.state, nowMs), FullIn: e.limit.TimeToFull(e.state, nowMs),
			}
			if then != nil {
				then(e, nowMs)
			}
		}
		e.mu.Unlock()
	}
	out := make([]LimitLevel, 0, len(byName))
	for _, l := range byName {
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b LimitLevel) int { return strings.Compare(a.Name, b.Name) })
	return out, time.UnixMilli(nowMs)
}

// entriesOf returns the entries of key's bucket limits, a shard at a time.
func (s *Store) entriesOf(key cascade.Key) []*entry {
	var out []*entry
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, e := range sh.m {
			if k.key == key {
				out = append(out, e)
			}
		}
		sh.mu.Unlock()
	}
	return out
}
