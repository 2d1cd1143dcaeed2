package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/dynalimit/dynalimit/pkg/descriptors"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// Entity records: a hash per entity (its parent, whether its debits
// cascade to its parents, when it was created), and per parent the set of
// its children's ids. A debit of an entity whose stored parent cascades is
// charged to the parent's bucket as well (Ancestors).

// Entity is a stored entity record.
type Entity struct {
	// Namespace is the entity's namespace; empty is the store's.
	Namespace string
	ID        string
	Parent    string
	Cascade   bool
	// Created is when the record was first written (zero on a write).
	Created time.Time
}

// The fields of an entity hash.
const (
	fieldParent  = "parent"
	fieldCascade = "cascade"
	fieldCreated = "created"
)

// entityOf reads an entity hash; false when it is empty (no record).
func entityOf(ns, id string, m map[string]string) (Entity, bool) {
	if len(m) == 0 {
		return Entity{}, false
	}
	ms, _ := strconv.ParseInt(m[fieldCreated], 10, 64)
	e := Entity{Namespace: ns, ID: id, Parent: m[fieldParent], Cascade: m[fieldCascade] == "1"}
	if ms > 0 {
		e.Created = time.UnixMilli(ms)
	}
	return e, true
}

// Entity returns the record of entity id of namespace ns (empty: the
// store's), an error wrapping ErrNotFound when there is none.
func (s *Store) Entity(ctx context.Context, ns, id string) (Entity, error) {
	ns = s.nsOr(ns)
	m, err := s.hgetall(ctx, s.keys.entity(ns, id))
	if err != nil {
		return Entity{}, err
	}
	e, ok := entityOf(ns, id, m)
	if !ok {
		return Entity{}, fmt.Errorf("redisstore: entity %q: %w", id, ErrNotFound)
	}
	return e, nil
}

// PutEntity creates or replaces an entity record and returns the one it
// replaced (false: none). It refuses a parent whose chain reaches e.ID (a
// cycle) and a chain of more than descriptors.MaxChain entities; the
// operator's command refuses before it an id or a parent that no request
// value names. This replica's decisions see it at
// once, the others' within Config.ConfigCacheTTL.
func (s *Store) PutEntity(ctx context.Context, e Entity) (Entity, bool, error) {
	if err := checkIDs(e); err != nil {
		return Entity{}, false, err
	}
	ns := s.nsOr(e.Namespace)
	if err := s.checkParent(ctx, ns, e.ID, e.Parent); err != nil {
		return Entity{}, false, err
	}
	before, err := s.Entity(ctx, ns, e.ID)
	existed := err == nil
	if err != nil && !errors.Is(err, ErrNotFound) {
		return Entity{}, false, err
	}
	c, err := s.conn()
	if err != nil {
		return Entity{}, false, err
	}
	key := s.keys.entity(ns, e.ID)
	flag := "0"
	if e.Cascade {
		flag = "1"
	}
	cmds := rueidis.Commands{
		c.B().Hset().Key(key).FieldValue().FieldValue(fieldParent, e.Parent).FieldValue(fieldCascade, flag).Build(),
		c.B().Hsetnx().Key(key).Field(fieldCreated).Value(strconv.FormatInt(s.now().UnixMilli(), 10)).Build(),
	}
	if before.Parent != "" && before.Parent != e.Parent {
		cmds = append(cmds, c.B().Srem().Key(s.keys.children(ns, before.Parent)).Member(e.ID).Build())
	}
	if e.Parent != "" {
		cmds = append(cmds, c.B().Sadd().Key(s.keys.children(ns, e.Parent)).Member(e.ID).Build())
	}
	cctx, cancel := s.callCtx(ctx)
	defer cancel()
	for _, r := range c.DoMulti(cctx, cmds...) {
		if err := r.Error(); err != nil {
			return Entity{}, false, classify(err)
		}
	}
	s.cache.forget(recordID{ns: ns, kind: 'e', entity: e.ID})
	return before, existed, nil
}

// checkIDs refuses an entity record without an id or its own parent.
func checkIDs(e Entity) error {
	if e.ID == "" {
		return errors.New("redisstore: entity: empty id")
	}
	if e.Parent == e.ID {
		return fmt.Errorf("redisstore: entity %q: an entity cannot be its own parent", e.ID)
	}
	return nil
}

// checkParent walks up from parent, as stored now, and refuses it for id
// when the walk reaches id (a cycle), loops, or passes
// descriptors.MaxChain entities counting id.
func (s *Store) checkParent(ctx context.Context, ns, id, parent string) error {
	path := []string{id}
	for up := parent; up != ""; {
		trail := strings.Join(append(slices.Clone(path), up), " -> ")
		switch {
		case up == id:
			return fmt.Errorf("redisstore: entity %q: parent %q would make a cycle (%s): choose a parent that is not %q or below it", id, parent, trail, id)
		case slices.Contains(path, up):
			return fmt.Errorf("redisstore: entity %q: the chain above parent %q loops (%s): give one of its entities another parent first", id, parent, trail)
		case len(path) == descriptors.MaxChain:
			return fmt.Errorf("redisstore: entity %q: parent %q makes a chain of more than %d entities (%s …)", id, parent, descriptors.MaxChain, trail)
		}
		path = append(path, up)
		e, err := s.Entity(ctx, ns, up)
		if errors.Is(err, ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		up = e.Parent
	}
	return nil
}

// Children returns the ids of the entities of namespace ns whose parent
// is id, sorted.
func (s *Store) Children(ctx context.Context, ns, id string) ([]string, error) {
	c, err := s.conn()
	if err != nil {
		return nil, err
	}
	cctx, cancel := s.callCtx(ctx)
	defer cancel()
	kids, err := c.Do(cctx, c.B().Smembers().Key(s.keys.children(s.nsOr(ns), id)).Build()).AsStrSlice()
	if err != nil {
		return nil, classify(err)
	}
	slices.Sort(kids)
	return kids, nil
}

// ChainLevel is one entity of a stored chain as Chain reads it.
type ChainLevel struct {
	// Entity is the entity's record; only its ID is set when Stored is
	// false.
	Entity Entity
	Stored bool
	// Limits are the limits stored for the entity and the resource Chain
	// was asked about, else its default limits; nil when none.
	Limits map[string]tokenbucket.Limit
	// Scope is where Limits are stored; the zero Scope when none are.
	Scope Scope
}

// Chain returns entity id of namespace ns and its parents, nearest first,
// as stored now (no cache), each with the limits stored for it and
// resource (else its default limits). It follows every parent, whether it
// cascades or not, and stops after an entity without a parent, at one
// without a record (listed, Stored false), after descriptors.MaxChain
// entities, and before an entity listed already: a cycle, reported.
func (s *Store) Chain(ctx context.Context, ns, id, resource string) ([]ChainLevel, bool, error) {
	ns = s.nsOr(ns)
	var out []ChainLevel
	for cur := id; cur != ""; {
		if slices.ContainsFunc(out, func(l ChainLevel) bool { return l.Entity.ID == cur }) {
			return out, true, nil
		}
		if len(out) == descriptors.MaxChain {
			break
		}
		lv := ChainLevel{Entity: Entity{Namespace: ns, ID: cur}}
		e, err := s.Entity(ctx, ns, cur)
		if err != nil && !errors.Is(err, ErrNotFound) {
			return nil, false, err
		}
		lv.Entity, lv.Stored = e, err == nil
		if !lv.Stored {
			lv.Entity = Entity{Namespace: ns, ID: cur}
		}
		scopes := []Scope{{Namespace: ns, Entity: cur, Resource: resource}, {Namespace: ns, Entity: cur}}
		if resource == "" {
			scopes = scopes[1:]
		}
		for _, sc := range scopes {
			l, err := s.Limits(ctx, sc)
			if err != nil && !errors.Is(err, ErrNotFound) {
				return nil, false, err
			}
			if err == nil {
				lv.Limits, lv.Scope = l, sc
				break
			}
		}
		out = append(out, lv)
		cur = lv.Entity.Parent
	}
	return out, false, nil
}
