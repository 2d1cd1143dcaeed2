package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// warming is the DynamoDB store while it opens, for what is wired before
// it has: the service's decisions and ancestors, lease settlements, and the
// degraded store's view of the buckets. A call that arrives before the
// store is open waits for it, within wait (BACKEND_TIMEOUT), and is then
// the store's: a request in the first moments of a replica is decided, not
// answered by ON_UNAVAILABLE because this process had not yet opened its
// store. Only a call whose wait ends with the store still unopened
// (DynamoDB has not answered its first calls within the budget) fails as
// DynamoDB not answering, as any call past its budget does. Work that
// starts with the process and may wait (the heartbeat, the namespace
// registry) asks for the store itself, once open (await).
type warming struct {
	p    atomic.Pointer[dynamo.Store]
	wait time.Duration

	mu    sync.Mutex
	openC chan struct{} // closed by set; made on first use
}

var errWarming = fmt.Errorf("dynamodb store not open yet (warming up): %w", dynamo.ErrUnavailable)

func (w *warming) openedCh() chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.openC == nil {
		w.openC = make(chan struct{})
	}
	return w.openC
}

// set makes st the store calls go to; it is called once.
func (w *warming) set(st *dynamo.Store) {
	w.p.Store(st)
	close(w.openedCh())
}

// opened returns the store, or nil while it is not open.
func (w *warming) opened() *dynamo.Store { return w.p.Load() }

// close closes the store, if it opened.
func (w *warming) close() error {
	if st := w.p.Load(); st != nil {
		return st.Close()
	}
	return nil
}

// await returns the store once it is open; nil if ctx ends first.
func (w *warming) await(ctx context.Context) *dynamo.Store {
	select {
	case <-w.openedCh():
		return w.p.Load()
	case <-ctx.Done():
		return nil
	}
}

// store returns the open store, waiting for it within wait; nil if it is
// still not open.
func (w *warming) store(ctx context.Context) *dynamo.Store {
	st := w.p.Load()
	if st == nil && w.wait > 0 {
		t := time.NewTimer(w.wait)
		select {
		case <-w.openedCh():
			st = w.p.Load()
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
	return st
}

// Acquire decides plan on the store (service.Store, degrade.Shared).
func (w *warming) Acquire(ctx context.Context, plan *cascade.Plan) (cascade.Decision, error) {
	st := w.store(ctx)
	if st == nil {
		return cascade.Decision{}, errWarming
	}
	return st.Acquire(ctx, plan)
}

// Settle applies a settlement on the store (adjust.Settler).
func (w *warming) Settle(ctx context.Context, s *cascade.Settlement) (cascade.Settled, error) {
	st := w.store(ctx)
	if st == nil {
		return cascade.Settled{}, errWarming
	}
	return st.Settle(ctx, s)
}

// Repay applies a replica's repayment on the store (degrade.Shared).
func (w *warming) Repay(ctx context.Context, r *cascade.Repayment) (cascade.Settled, error) {
	st := w.store(ctx)
	if st == nil {
		return cascade.Settled{}, errWarming
	}
	return st.Repay(ctx, r)
}

// Ancestors returns the stored ancestors of key's entity
// (service.Hierarchy).
func (w *warming) Ancestors(ctx context.Context, key cascade.Key, max int) ([]cascade.Ancestor, error) {
	st := w.store(ctx)
	if st == nil {
		return nil, errWarming
	}
	return st.Ancestors(ctx, key, max)
}

// LastSeen is what the store last saw of d's bucket; nothing while it is
// not open (degrade.Seer).
func (w *warming) LastSeen(d *cascade.Debit) (tokenbucket.Millitokens, bool, bool) {
	if st := w.p.Load(); st != nil {
		return st.LastSeen(d)
	}
	return 0, false, false
}

// Demand is this replica's part of the recent demand of d's bucket, as the
// store saw it; none while it is not open (degrade.Demand).
func (w *warming) Demand(d *cascade.Debit) (float64, bool) {
	if st := w.p.Load(); st != nil {
		return st.Demand(d)
	}
	return 0, false
}
