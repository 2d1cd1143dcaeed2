package service

import (
	"context"
	"strconv"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/descriptors"
)

// Hierarchy gives the stored ancestors of an entity: the DynamoDB store's
// entity records (pkg/dynamo). Implementations MUST be safe for concurrent
// use. An error wrapping cascade.ErrContended means the lookup was too busy
// to finish within the decision's budget (the request is refused as busy);
// any other error means the store could not answer (ON_UNAVAILABLE).
type Hierarchy interface {
	// Ancestors returns the entities above key's entity that a debit of it
	// charges, nearest first, at most max, each with its bucket item and
	// its stored limits.
	Ancestors(ctx context.Context, key cascade.Key, max int) ([]cascade.Ancestor, error)
}

// tiers fills each applying item's tiers: for a hierarchical rule the
// match's tiers (its own bucket, and with cascade: true each configured
// entity level above it); otherwise the one bucket of the descriptor's
// entries in the domain. A descriptor that names an entity by an empty
// value is an invalid request.
func (s *Service) tiers(domain string, items []item) error {
	for i := range items {
		it := &items[i]
		if !it.applies() {
			continue
		}
		r := &it.rule
		if it.hierarchical() {
			if key, empty := r.match.EmptyEntity(); empty {
				return invalid(reasonEntity, "service: descriptor "+strconv.Itoa(i)+": entity level "+strconv.Quote(key)+" has an empty value")
			}
			r.tiers = r.few[:0]
			if n := r.match.NumTiers(); n > len(r.few) {
				r.tiers = make([]tier, 0, n+1) // room for a stored parent
			}
			for j := range r.match.NumTiers() {
				t := r.match.Tier(j)
				r.tiers = append(r.tiers, tier{
					key:    cascade.Key{Namespace: r.match.Rule.Namespace, Entity: t.Entity, Resource: t.Resource},
					limits: t.Limits,
					rule:   t.Rule,
					depth:  t.Depth,
					level:  t.Key,
				})
			}
			r.tiers[0].limits = r.limits
			continue
		}
		r.few[0] = tier{key: itemKey(domain, it), limits: r.limits}
		if r.matched && !r.override {
			r.few[0].rule = r.match.Rule
		}
		r.tiers = r.few[:1]
	}
	return nil
}

// ancestors adds to each cascading item the tiers of its stored ancestors,
// above its topmost configured tier, so that a chain is at most
// descriptors.MaxChain entities long.
func (s *Service) ancestors(ctx context.Context, items []item) error {
	if s.hierarchy == nil {
		return nil
	}
	for i := range items {
		it := &items[i]
		r := &it.rule
		if !it.applies() || !it.hierarchical() || !r.match.Rule.Cascade || len(r.tiers) >= descriptors.MaxChain {
			continue
		}
		top := r.tiers[len(r.tiers)-1]
		up, err := s.hierarchy.Ancestors(ctx, top.key, descriptors.MaxChain-len(r.tiers))
		if err != nil {
			return err
		}
		for j, a := range up {
			t := tier{key: a.Key, depth: top.depth + 1 + j, limits: make([]descriptors.Limit, len(a.Limits))}
			for k, l := range a.Limits {
				t.limits[k] = storedLimit(l)
			}
			r.tiers = append(r.tiers, t)
		}
	}
	return nil
}

// storedLimit describes a stored limit as a configured one, so that answers
// and headers name it like any other.
func storedLimit(l cascade.NamedLimit) descriptors.Limit {
	rpu, unit, mult := describe(l.Bucket)
	return descriptors.Limit{
		Name:            l.Name,
		ID:              l.Name,
		Unit:            unit,
		RequestsPerUnit: rpu,
		UnitMultiplier:  mult,
		Bucket:          l.Bucket,
	}
}
