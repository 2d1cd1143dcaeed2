package redisstore

import (
	"context"
	"sort"
	"time"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// Split is two stores, as envoyproxy/ratelimit's REDIS_PERSECOND has it:
// the limits of a second (a refill period of one second) on PerSecond,
// every other on Main. A plan on both is decided on each, and given back
// on both when refused (as a plan over several cluster slots is); a
// settlement or a repayment is applied once on each. Heartbeats are
// Main's. Make it with NewSplit.
type Split struct {
	Main, PerSecond *Store
}

// NewSplit returns the Split of main and perSecond: the per-second store
// reads the entity records (an entity's chain, and so its keys' hash tag
// on a cluster) from main, which keeps them.
func NewSplit(main, perSecond *Store) *Split {
	perSecond.chains.records = main
	return &Split{Main: main, PerSecond: perSecond}
}

// perSecond reports whether l lives on the per-second store.
func perSecond(l tokenbucket.Limit) bool {
	return l.RefillPeriod == time.Second && l.Calendar.IsZero()
}

// split returns the parts of debits on each store: one when they all
// live on one.
func (sp *Split) split(debits []cascade.Debit) []part {
	m, ps := part{st: sp.Main}, part{st: sp.PerSecond}
	for i, d := range debits {
		p := &m
		if perSecond(d.Bucket) {
			p = &ps
		}
		p.idx = append(p.idx, i)
		p.debits = append(p.debits, d)
	}
	var out []part
	for _, p := range []part{m, ps} {
		if len(p.idx) > 0 {
			out = append(out, p)
		}
	}
	return out
}

// Acquire decides p on the stores its limits live on, its stored limits
// resolved on Main (which keeps the entities and stored limits).
func (sp *Split) Acquire(ctx context.Context, p *cascade.Plan) (cascade.Decision, error) {
	if p == nil || len(p.Debits) == 0 {
		return sp.Main.Acquire(ctx, p)
	}
	debits, err := sp.Main.resolve(ctx, p.Debits) // the records are Main's
	if err != nil {
		return cascade.Decision{}, err
	}
	parts := sp.split(debits)
	if len(parts) == 1 {
		return parts[0].st.acquire(ctx, &cascade.Plan{Debits: debits}, false)
	}
	if err := validate(debits); err != nil {
		return cascade.Decision{}, err
	}
	var slots []part // each store's part, in its slots on a cluster
	for _, p := range parts {
		in, err := p.st.slotParts(ctx, p.debits, p.idx)
		if err != nil {
			return cascade.Decision{}, err
		}
		slots = append(slots, in...)
	}
	return acquireParts(ctx, debits, slots)
}

// Settle applies st on each store, once per ID on each.
func (sp *Split) Settle(ctx context.Context, st *cascade.Settlement) (cascade.Settled, error) {
	if st == nil || len(st.Debits) == 0 {
		return sp.Main.Settle(ctx, st)
	}
	return onEachPart(sp.split(st.Debits), len(st.Debits), func(p part) (cascade.Settled, error) {
		one := *st
		one.Debits = p.debits
		return p.st.Settle(ctx, &one)
	})
}

// Repay applies r on each store, once per stamp on each.
func (sp *Split) Repay(ctx context.Context, r *cascade.Repayment) (cascade.Settled, error) {
	if r == nil || len(r.Debits) == 0 {
		return sp.Main.Repay(ctx, r)
	}
	return onEachPart(sp.split(r.Debits), len(r.Debits), func(p part) (cascade.Settled, error) {
		one := *r
		one.Debits = p.debits
		return p.st.Repay(ctx, &one)
	})
}

// onEachPart applies a settlement or a repayment of n debits part by part
// (apply), each once on its store: a duplicate when every part is.
func onEachPart(parts []part, n int, apply func(part) (cascade.Settled, error)) (cascade.Settled, error) {
	out := cascade.Settled{Duplicate: true, Statuses: make([]cascade.Status, n)}
	for _, p := range parts {
		res, err := apply(p)
		if err != nil {
			return cascade.Settled{}, err
		}
		if !res.Duplicate {
			out.Duplicate = false
			for i, at := range p.idx {
				if i < len(res.Statuses) {
					out.Statuses[at] = res.Statuses[i]
				}
			}
		}
	}
	if out.Duplicate {
		out.Statuses = nil
	}
	return out, nil
}

// Heartbeat records the replica on Main.
func (sp *Split) Heartbeat(ctx context.Context, id string, ttl time.Duration, stale []string) (int, []string, error) {
	return sp.Main.Heartbeat(ctx, id, ttl, stale)
}

// LastSeen asks the store d's limit lives on.
func (sp *Split) LastSeen(d *cascade.Debit) (tokenbucket.Millitokens, bool, bool) {
	if perSecond(d.Bucket) {
		return sp.PerSecond.LastSeen(d)
	}
	return sp.Main.LastSeen(d)
}

// Close closes both stores.
func (sp *Split) Close() error {
	_ = sp.PerSecond.Close()
	return sp.Main.Close()
}

// Usage merges both stores' usage: a window's limits from each.
func (sp *Split) Usage(ctx context.Context, ns, entity, resource string, w byte, since time.Time) ([]Snapshot, error) {
	a, err := sp.Main.Usage(ctx, ns, entity, resource, w, since)
	if err != nil {
		return nil, err
	}
	b, err := sp.PerSecond.Usage(ctx, ns, entity, resource, w, since)
	if err != nil {
		return nil, err
	}
	type at struct {
		start    int64
		resource string
	}
	idx := map[at]int{}
	for i, s := range a {
		idx[at{s.Start.UnixMilli(), s.Resource}] = i
	}
	for _, s := range b {
		i, ok := idx[at{s.Start.UnixMilli(), s.Resource}]
		if !ok {
			a = append(a, s)
			continue
		}
		for name, v := range s.Limits {
			a[i].Limits[name] += v
		}
	}
	sort.SliceStable(a, func(i, j int) bool {
		if !a[i].Start.Equal(a[j].Start) {
			return a[i].Start.Before(a[j].Start)
		}
		return a[i].Resource < a[j].Resource
	})
	return a, nil
}
