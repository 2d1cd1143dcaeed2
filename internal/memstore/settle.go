package memstore

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
	"time"

	"github.com/dynalimit/dynalimit/pkg/cascade"
)

// MaxSettlements bounds the settlement IDs a store remembers at once: those
// settled whose Expires (plus settleMargin) has not passed. Each shard of
// the store remembers at most ⌈MaxSettlements/shards⌉. An ID of 26 bytes
// (a lease's) takes about 94 bytes in all, one of 64 about 126 (measured
// with 200,000 IDs, the heap after GC): 100 to 130 MB at the bound.
const MaxSettlements = 1 << 20

// settleMargin is how long past its Expires an ID is remembered: a lease
// checked just before it expired may be settled just after.
const settleMargin = time.Minute

// ErrTooManySettlements is the error of a settlement that the store cannot
// remember: it remembers MaxSettlements IDs (in the settlement's shard)
// that have not expired. The settlement is not applied; room frees up as
// IDs expire.
var ErrTooManySettlements = errors.New("memstore: too many settlements within their lifetime")

// settled is one shard of the settlement IDs: a map of the IDs to their
// expiry and a heap of the same, soonest first, behind a lock of its own.
type settled struct {
	mu  sync.Mutex
	ids map[string]int64 // ID → unix ms when it may be forgotten
	exp expiries
	_   [64]byte
}

// expiry is one ID and the instant it may be forgotten.
type expiry struct {
	atMs int64
	id   string
}

// expiries is a min-heap of expiry by instant (container/heap).
type expiries []expiry

func (h expiries) Len() int           { return len(h) }
func (h expiries) Less(i, j int) bool { return h[i].atMs < h[j].atMs }
func (h expiries) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *expiries) Push(x any)        { *h = append(*h, x.(expiry)) }
func (h *expiries) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// forget drops the IDs that expired by nowMs. Each ID is pushed and popped
// once: O(log n) amortized per settlement. st.mu must be held.
func (st *settled) forget(nowMs int64) {
	for len(st.exp) > 0 && st.exp[0].atMs <= nowMs {
		delete(st.ids, heap.Pop(&st.exp).(expiry).id)
	}
	if len(st.exp) == 0 && cap(st.exp) > 1024 {
		st.exp = nil // give back a heap that a burst grew
	}
}

// Settle applies a settlement (see cascade.Settlement) at the store's
// current time: its charges (into debt) and refunds (never above capacity)
// as one plan decided by cascade.Decide, whole, exactly as Acquire decides
// a plan (the same locks: atomic with every Acquire and Settle on those
// buckets), at most once per ID until st.Expires. A second Settle of an ID
// returns Duplicate and changes nothing. IDs are one set per store, whatever
// namespaces the debits name (IDs are unique: a lease's). Errors: ctx already done; an invalid settlement (wrapping
// cascade.ErrSettlement, a limit included); a key larger than a shard
// holds (cascade.ErrInvalid); ErrTooManySettlements. None records the ID.
func (s *Store) Settle(ctx context.Context, st *cascade.Settlement) (cascade.Settled, error) {
	if err := ctx.Err(); err != nil {
		return cascade.Settled{}, fmt.Errorf("memstore: settle: %w", err)
	}
	if st == nil {
		return cascade.Settled{}, fmt.Errorf("memstore: settle: nil settlement: %w", cascade.ErrSettlement)
	}
	if err := st.Validate(); err != nil {
		return cascade.Settled{}, fmt.Errorf("memstore: settle: %w", err)
	}
	p := &cascade.Plan{Debits: make([]cascade.Debit, len(st.Debits))}
	for i, d := range st.Debits {
		if err := d.Bucket.Validate(); err != nil {
			return cascade.Settled{}, fmt.Errorf("memstore: settle %q: debit %d of %s: %w: %w", st.ID, i, d.Limit, cascade.ErrSettlement, err)
		}
		d.Role = cascade.Advisory // a settlement is never refused
		p.Debits[i] = d
	}
	id := st.ID
	sh := &s.settled[maphash.String(s.seed, id)&s.mask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.forget(s.now().UnixMilli())
	if _, ok := sh.ids[id]; ok {
		return cascade.Settled{Duplicate: true}, nil
	}
	if len(sh.ids) >= s.perSettled {
		return cascade.Settled{}, fmt.Errorf("memstore: settle %q: %w (%d in its shard)", st.ID, ErrTooManySettlements, len(sh.ids))
	}
	dec, err := s.apply(p, true)
	if err != nil {
		return cascade.Settled{}, fmt.Errorf("memstore: settle %q: %w", st.ID, err)
	}
	at := st.Expires.Add(settleMargin).UnixMilli()
	sh.ids[id] = at
	heap.Push(&sh.exp, expiry{atMs: at, id: id})
	return cascade.Settled{Statuses: dec.Statuses}, nil
}

// Settlements returns how many settlement IDs the store remembers now
// (expired ones included until a Settle in their shard forgets them).
func (s *Store) Settlements() int {
	n := 0
	for i := range s.settled {
		sh := &s.settled[i]
		sh.mu.Lock()
		n += len(sh.ids)
		sh.mu.Unlock()
	}
	return n
}
