package storetest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// Reference is the simplest correct store: one mutex, one map that never
// forgets a bucket unless told to (Forget, the model of an eviction), and
// cascade.Decide. The suite passes against it, and
// other stores' randomised tests compare their decisions with it. It is safe
// for concurrent use.
//
// Each bucket limit keeps its level and the Limit it was last written with.
// A debit that names the bucket with a different Limit (a reloaded config)
// first restates the level in the new limit's terms, keeping what the bucket
// holds (see tokenbucket.Limit.Restate); a bucket never seen starts full.
type Reference struct {
	now     func() time.Time
	mu      sync.Mutex
	m       map[refKey]refEntry
	settled map[string]bool // settlement IDs applied (never forgotten)
}

type refKey struct {
	k     cascade.Key
	limit string
}

type refEntry struct {
	state tokenbucket.State
	limit tokenbucket.Limit
}

// NewReference returns an empty reference store reading time from now.
func NewReference(now func() time.Time) *Reference {
	return &Reference{now: now, m: make(map[refKey]refEntry), settled: make(map[string]bool)}
}

// Acquire decides p with cascade.Decide over the stored levels and stores
// every level the decision changed.
func (s *Reference) Acquire(ctx context.Context, p *cascade.Plan) (cascade.Decision, error) {
	if err := ctx.Err(); err != nil {
		return cascade.Decision{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.decide(p), nil
}

// Settle applies st once per ID (the reference never forgets one): its
// charges and refunds as one plan of advisory debits decided by
// cascade.Decide, which is never refused. An invalid settlement is an error
// wrapping cascade.ErrSettlement.
func (s *Reference) Settle(ctx context.Context, st *cascade.Settlement) (cascade.Settled, error) {
	if err := ctx.Err(); err != nil {
		return cascade.Settled{}, err
	}
	if err := st.Validate(); err != nil {
		return cascade.Settled{}, err
	}
	p := &cascade.Plan{Debits: make([]cascade.Debit, len(st.Debits))}
	for i, d := range st.Debits {
		if err := d.Bucket.Validate(); err != nil {
			return cascade.Settled{}, fmt.Errorf("storetest: debit %d: %w: %w", i, cascade.ErrSettlement, err)
		}
		d.Role = cascade.Advisory
		p.Debits[i] = d
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.settled[st.ID] {
		return cascade.Settled{Duplicate: true}, nil
	}
	s.settled[st.ID] = true
	return cascade.Settled{Statuses: s.decide(p).Statuses}, nil
}

// decide decides p and stores what changed; s.mu must be held.
func (s *Reference) decide(p *cascade.Plan) cascade.Decision {
	// The clock is read under the lock: a decision at an instant earlier
	// than one already written sees the bucket emptier by the refill in
	// between, so a stale instant would under-admit.
	nowMs := s.now().UnixMilli()
	slot := make([]int, len(p.Debits))
	index := make(map[refKey]int)
	var (
		keys     []refKey
		limits   []tokenbucket.Limit
		levels   []tokenbucket.Level
		restated []bool
	)
	for i, d := range p.Debits {
		k := refKey{d.Key, d.Limit}
		j, ok := index[k]
		if !ok {
			j = len(keys)
			index[k] = j
			keys = append(keys, k)
			limits = append(limits, d.Bucket)
			e, ok := s.m[k]
			restated = append(restated, ok && e.limit != d.Bucket)
			switch {
			case !ok:
				levels = append(levels, tokenbucket.New(d.Bucket.Full(nowMs)))
			case e.limit != d.Bucket:
				levels = append(levels, tokenbucket.New(d.Bucket.Restate(e.state, e.limit, nowMs)))
			default:
				levels = append(levels, tokenbucket.Stored(e.state))
			}
		}
		limits[j] = d.Bucket // the last debit's limit is the one stored
		slot[i] = j
	}
	dec := cascade.Decide(p, slot, levels, nowMs)
	for j, k := range keys {
		if levels[j].Changed() || restated[j] {
			s.m[k] = refEntry{state: levels[j].State(), limit: limits[j]}
		}
	}
	return dec
}

// Tokens returns what the first stored bucket limit that match accepts
// holds now, in millitokens, and whether there is one.
func (s *Reference) Tokens(match func(k cascade.Key, limit string) bool) (tokenbucket.Millitokens, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	nowMs := s.now().UnixMilli()
	for k, e := range s.m {
		if match(k.k, k.limit) {
			return e.limit.Tokens(e.state, nowMs), true
		}
	}
	return 0, false
}

// Forget drops the bucket limit limit of key k, as a store at its memory
// bound evicts one: its next debit finds it full, so the store may admit
// what it lacked of full once more than a store that never forgets. A store
// that evicts matches the reference when the reference forgets what it
// evicted, and nothing else.
func (s *Reference) Forget(k cascade.Key, limit string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, refKey{k, limit})
}
