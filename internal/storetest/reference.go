package storetest

import (
	"context"
	"sync"
	"time"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// Reference is the simplest correct store: one mutex, one map that never
// forgets a bucket, and cascade.Decide. The suite passes against it, and
// other stores' randomised tests compare their decisions with it. It is safe
// for concurrent use.
type Reference struct {
	now func() time.Time
	mu  sync.Mutex
	m   map[refKey]tokenbucket.State
}

type refKey struct {
	k     cascade.Key
	limit string
}

// NewReference returns an empty reference store reading time from now.
func NewReference(now func() time.Time) *Reference {
	return &Reference{now: now, m: make(map[refKey]tokenbucket.State)}
}

// Acquire decides p with cascade.Decide over the stored states; a bucket
// never seen starts full.
func (s *Reference) Acquire(ctx context.Context, p *cascade.Plan) (cascade.Decision, error) {
	if err := ctx.Err(); err != nil {
		return cascade.Decision{}, err
	}
	nowMs := s.now().UnixMilli()
	s.mu.Lock()
	defer s.mu.Unlock()
	slot := make([]int, len(p.Debits))
	var keys []refKey
	var states []tokenbucket.State
	for i, d := range p.Debits {
		k := refKey{d.Key, d.Limit}
		slot[i] = -1
		for j := range keys {
			if keys[j] == k {
				slot[i] = j
			}
		}
		if slot[i] < 0 {
			st, ok := s.m[k]
			if !ok {
				st = d.Bucket.Full(nowMs)
			}
			slot[i] = len(keys)
			keys = append(keys, k)
			states = append(states, st)
		}
	}
	dec := cascade.Decide(p, slot, states, nowMs)
	for j, k := range keys {
		s.m[k] = states[j]
	}
	return dec, nil
}
