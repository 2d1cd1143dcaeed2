package admin_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dynalimit/dynalimit/internal/admin"
	"github.com/dynalimit/dynalimit/pkg/descriptors"
	dadmin "github.com/dynalimit/dynalimit/pkg/dynamo/admin"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// mapStore is a store built to the operator's interfaces alone, in maps:
// the next store's checklist. A store gives the operator's commands what
// it keeps, one interface of internal/admin per job, and passes
// internal/admintest for those, by these steps:
//
//  1. Implement the interfaces of the jobs the store keeps, with their
//     errors: admin.Entities (entity records, whose parents never make a
//     cycle nor a chain longer than descriptors.MaxChain, and the limits
//     stored at a scope; admin.ErrNotFound for what is not there),
//     admin.Audit (a record of every write, naming admin.PrincipalOf(ctx),
//     oldest first, by scope), admin.Namespaces (a registry: register,
//     delete, recover, purge refused with admin.ErrNamespaceActive while
//     active, orphans), admin.Usage (snapshots by window) and
//     admin.Buckets (read, reset and top up a bucket the store decides
//     on). A namespace empty in a call is the store's. This one keeps no
//     buckets: it does not decide.
//  2. Gather them in an admin.Stores naming the store, a nil interface for
//     each job it does not keep: its verbs answer admin.ErrUnsupported
//     with that name, and the admin API answers them 501.
//  3. Run admintest.Run on it, declaring the jobs it keeps
//     (Implements), with Acquire when it keeps buckets and AddUsage when
//     it keeps usage. Each scenario's data lives in a namespace of its
//     own, so a store over a shared backend can serve the whole suite.
//  4. Give the serving process's store to admin.NewAPI (cmd/ratelimit),
//     and, for the command line, open the store once per command as
//     admin.Run opens DynamoDB.
type mapStore struct {
	ns string // the store's namespace

	mu       sync.Mutex
	entities map[string]admin.Entity                 // by ns, id
	limits   map[string]map[string]tokenbucket.Limit // by scope key
	audit    []auditEntry                            // oldest first
	registry map[string]admin.Namespace              // by name
	snaps    map[string]admin.UsageSnapshot          // by snapshot key
	seq      int                                     // audit ids
}

// auditEntry is an audit record with the namespace and the audit key it
// is kept under.
type auditEntry struct {
	ns, key string
	rec     admin.AuditRecord
}

func newMapStore(ns string) *mapStore {
	return &mapStore{ns: ns, entities: map[string]admin.Entity{}, limits: map[string]map[string]tokenbucket.Limit{},
		registry: map[string]admin.Namespace{}, snaps: map[string]admin.UsageSnapshot{}}
}

// stores is m as the operator's commands see it: no buckets.
func (m *mapStore) stores() admin.Stores {
	return admin.Stores{Name: "the map store", Entities: m, Audit: m, Namespaces: m, Usage: m}
}

func (m *mapStore) nsOr(ns string) string {
	if ns == "" {
		return m.ns
	}
	return ns
}

func key(parts ...string) string { return strings.Join(parts, "\x00") }

// scopeKey is where sc's limits are kept; auditKey where its records
// are (an entity's, whatever the resource, together).
func scopeKey(ns string, sc admin.Scope) string {
	return key(ns, fmt.Sprint(sc.System), sc.Entity, sc.Resource)
}

func auditKey(sc admin.Scope) string {
	switch {
	case sc.Entity != "":
		return "entity/" + sc.Entity
	case sc.System:
		return "system"
	}
	return "resource/" + sc.Resource
}

// record appends an audit record; m.mu is held.
func (m *mapStore) record(ctx context.Context, ns string, sc admin.Scope, action, before, after string) {
	m.seq++
	m.audit = append(m.audit, auditEntry{ns: ns, key: auditKey(sc), rec: admin.AuditRecord{
		ID: fmt.Sprintf("%08d", m.seq), At: time.Now(), Action: action, Scope: sc.String(), Before: before, After: after, Principal: admin.PrincipalOf(ctx),
	}})
}

func (m *mapStore) PutEntity(ctx context.Context, e admin.Entity) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	e.Namespace = m.nsOr(e.Namespace)
	n := 1
	for p := e.Parent; p != ""; n++ {
		if p == e.ID {
			return fmt.Errorf("map: entity %q: parent %q would make a cycle", e.ID, e.Parent)
		}
		if n >= descriptors.MaxChain {
			return fmt.Errorf("map: entity %q: a chain of more than %d entities", e.ID, descriptors.MaxChain)
		}
		p = m.entities[key(e.Namespace, p)].Parent
	}
	before := m.entities[key(e.Namespace, e.ID)]
	m.entities[key(e.Namespace, e.ID)] = e
	m.record(ctx, e.Namespace, admin.Scope{Entity: e.ID}, "entity.put", fmt.Sprintf("%+v", before), fmt.Sprintf("%+v", e))
	return nil
}

func (m *mapStore) Entity(_ context.Context, ns, id string) (admin.Entity, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.entities[key(m.nsOr(ns), id)]
	if !ok {
		return admin.Entity{}, fmt.Errorf("map: entity %q: %w", id, admin.ErrNotFound)
	}
	return e, nil
}

func (m *mapStore) Children(_ context.Context, ns, id string) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, e := range m.entities {
		if e.Namespace == m.nsOr(ns) && e.Parent == id {
			out = append(out, e.ID)
		}
	}
	slices.Sort(out)
	return out, nil
}

func (m *mapStore) Chain(_ context.Context, ns, id, resource string) ([]admin.ChainLevel, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ns = m.nsOr(ns)
	var levels []admin.ChainLevel
	seen := map[string]bool{}
	for cur := id; len(levels) < descriptors.MaxChain; {
		e, stored := m.entities[key(ns, cur)]
		lv := admin.ChainLevel{Entity: admin.Entity{Namespace: ns, ID: cur}, Stored: stored}
		if stored {
			lv.Entity = e
		}
		scopes := []admin.Scope{{Entity: cur}}
		if resource != "" {
			scopes = []admin.Scope{{Entity: cur, Resource: resource}, {Entity: cur}}
		}
		for _, sc := range scopes {
			if l := m.limits[scopeKey(ns, sc)]; len(l) > 0 {
				lv.Limits, lv.Scope = maps.Clone(l), admin.Scope{Namespace: ns, Entity: sc.Entity, Resource: sc.Resource}
				break
			}
		}
		levels = append(levels, lv)
		seen[cur] = true
		if !stored || e.Parent == "" {
			return levels, false, nil
		}
		if seen[e.Parent] {
			return levels, true, nil
		}
		cur = e.Parent
	}
	return levels, false, nil
}

func (m *mapStore) SetLimits(ctx context.Context, sc admin.Scope, limits map[string]tokenbucket.Limit) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	ns := m.nsOr(sc.Namespace)
	k := scopeKey(ns, sc)
	before := maps.Clone(m.limits[k])
	after := maps.Clone(before)
	if after == nil {
		after = map[string]tokenbucket.Limit{}
	}
	maps.Copy(after, limits)
	m.limits[k] = after
	m.record(ctx, ns, sc, "limits.set", dadmin.FormatLimits(before), dadmin.FormatLimits(after))
	return nil
}

func (m *mapStore) Limits(_ context.Context, sc admin.Scope) (map[string]tokenbucket.Limit, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.limits[scopeKey(m.nsOr(sc.Namespace), sc)]
	if len(l) == 0 {
		return nil, fmt.Errorf("map: limits of %s: %w", sc, admin.ErrNotFound)
	}
	return maps.Clone(l), nil
}

func (m *mapStore) DeleteLimits(ctx context.Context, sc admin.Scope, names ...string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	ns := m.nsOr(sc.Namespace)
	k := scopeKey(ns, sc)
	before := maps.Clone(m.limits[k])
	after := map[string]tokenbucket.Limit{}
	if len(names) > 0 {
		after = maps.Clone(before)
		for _, n := range names {
			delete(after, n)
		}
	}
	if len(after) == 0 {
		delete(m.limits, k)
	} else {
		m.limits[k] = after
	}
	m.record(ctx, ns, sc, "limits.delete", dadmin.FormatLimits(before), dadmin.FormatLimits(after))
	return nil
}

func (m *mapStore) Audit(_ context.Context, sc admin.Scope) ([]admin.AuditRecord, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []admin.AuditRecord
	for _, a := range m.audit {
		if a.ns == m.nsOr(sc.Namespace) && a.key == auditKey(sc) {
			out = append(out, a.rec)
		}
	}
	return out, nil
}
