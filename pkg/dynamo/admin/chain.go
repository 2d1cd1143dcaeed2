package admin

import (
	"context"
	"errors"
	"slices"

	"github.com/dynalimit/dynalimit/pkg/descriptors"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// ChainLevel is one entity of a stored chain as Chain reads it.
type ChainLevel struct {
	// Entity is the entity's record; only its ID is set when Stored is
	// false.
	Entity dynamo.Entity
	// Stored reports whether the entity record exists.
	Stored bool
	// Limits are the limits stored for the entity and the resource Chain
	// was asked about, or else the entity's default limits; nil when none.
	Limits map[string]tokenbucket.Limit
	// Scope is the scope Limits were stored at (an entity and resource, or
	// the entity alone); the zero Scope when none are stored.
	Scope Scope
}

// Chain returns entity id of namespace ns (empty: the store's) and the
// chain of its parents, nearest first, as stored now (strongly consistent
// reads, no cache), each with its limits for resource (empty: only the
// entities' default limits). It follows every parent whether or not it
// cascades; it stops after an entity without a parent, at a parent that
// has no record (included, with Stored false), after descriptors.MaxChain
// entities, and before an entity already listed (a cycle, which cycle
// reports). It is for the admin commands.
func (s *Store) Chain(ctx context.Context, ns, id, resource string) (levels []ChainLevel, cycle bool, err error) {
	ns = s.t.NsOr(ns)
	for cur := id; cur != ""; {
		if slices.ContainsFunc(levels, func(l ChainLevel) bool { return l.Entity.ID == cur }) {
			return levels, true, nil
		}
		if len(levels) == descriptors.MaxChain {
			break
		}
		lv := ChainLevel{Entity: dynamo.Entity{Namespace: ns, ID: cur}}
		e, err := s.Entity(ctx, ns, cur)
		switch {
		case err == nil:
			lv.Entity, lv.Stored = e, true
		case !errors.Is(err, dynamo.ErrNotFound):
			return nil, false, err
		}
		scopes := []Scope{{Namespace: ns, Entity: cur}}
		if resource != "" {
			scopes = []Scope{{Namespace: ns, Entity: cur, Resource: resource}, scopes[0]}
		}
		for _, sc := range scopes {
			l, err := s.Limits(ctx, sc)
			if err == nil {
				lv.Limits, lv.Scope = l, sc
				break
			}
			if !errors.Is(err, dynamo.ErrNotFound) {
				return nil, false, err
			}
		}
		levels = append(levels, lv)
		if !lv.Stored {
			break
		}
		cur = lv.Entity.Parent
	}
	return levels, false, nil
}
