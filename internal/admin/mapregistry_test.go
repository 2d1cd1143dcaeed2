package admin_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/internal/admin"
	"github.com/dynalimit/dynalimit/internal/admintest"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// TestMapStore runs the operator's suite on the map store: entities,
// audit, namespaces and usage pass it, and every bucket verb answers that
// the map store keeps no buckets.
func TestMapStore(t *testing.T) {
	admintest.Run(t, func(t *testing.T, ns string) admintest.Store {
		m := newMapStore(ns)
		return admintest.Store{
			Stores:     m.stores(),
			Implements: []admin.Job{admin.JobEntities, admin.JobAudit, admin.JobNamespaces, admin.JobUsage},
			AddUsage:   m.addUsage,
		}
	})
}

func (m *mapStore) RegisterNamespace(ctx context.Context, name string) (admin.Namespace, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ns, ok := m.registry[name]; ok {
		return ns, nil
	}
	ns := admin.Namespace{Name: name, ID: fmt.Sprintf("%012x", len(m.registry)+1), State: admin.NamespaceActive}
	m.registry[name] = ns
	m.record(ctx, name, admin.Scope{System: true}, "namespace.register", "", "name="+name+" id="+ns.ID)
	return ns, nil
}

func (m *mapStore) Namespaces(context.Context) ([]admin.Namespace, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := slices.Collect(maps.Values(m.registry))
	slices.SortFunc(out, func(a, b admin.Namespace) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func (m *mapStore) Namespace(_ context.Context, name string) (admin.Namespace, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ns, ok := m.registry[name]
	if !ok {
		return admin.Namespace{}, fmt.Errorf("map: namespace %q: %w", name, admin.ErrNotFound)
	}
	return ns, nil
}

// move moves a registered namespace to state to from one of from, audited
// as action; false when it is already in to.
func (m *mapStore) move(ctx context.Context, name, action, to string, from ...string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ns, ok := m.registry[name]
	switch {
	case !ok:
		return false, fmt.Errorf("map: namespace %q: %w", name, admin.ErrNotFound)
	case ns.State == to || !slices.Contains(from, ns.State):
		return false, nil
	}
	m.record(ctx, name, admin.Scope{System: true}, action, "state="+ns.State, "state="+to)
	ns.State, ns.Changed = to, time.Now()
	m.registry[name] = ns
	return true, nil
}

func (m *mapStore) DeleteNamespace(ctx context.Context, name string) (bool, error) {
	return m.move(ctx, name, "namespace.delete", admin.NamespaceDeleted, admin.NamespaceActive)
}

func (m *mapStore) RecoverNamespace(ctx context.Context, name string) (bool, error) {
	return m.move(ctx, name, "namespace.recover", admin.NamespaceActive, admin.NamespaceDeleted, admin.NamespacePurged)
}

// items counts the items of each namespace: entities, limits, audit
// records and usage snapshots; m.mu is held.
func (m *mapStore) items() map[string]int {
	n := map[string]int{}
	for _, keys := range [][]string{slices.Collect(maps.Keys(m.entities)), slices.Collect(maps.Keys(m.limits)), slices.Collect(maps.Keys(m.snaps))} {
		for _, k := range keys {
			ns, _, _ := strings.Cut(k, "\x00")
			n[ns]++
		}
	}
	for _, a := range m.audit {
		n[a.ns]++
	}
	return n
}

func (m *mapStore) Orphans(context.Context) ([]admin.Orphan, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []admin.Orphan
	for ns, n := range m.items() {
		if _, ok := m.registry[ns]; !ok {
			out = append(out, admin.Orphan{Name: ns, Items: n})
		}
	}
	slices.SortFunc(out, func(a, b admin.Orphan) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func (m *mapStore) PurgeNamespace(ctx context.Context, name string, done func(deleted int)) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ns, ok := m.registry[name]
	if ok && ns.State == admin.NamespaceActive {
		return 0, fmt.Errorf("map: purge %q: %w", name, admin.ErrNamespaceActive)
	}
	n := m.items()[name]
	in := func(k string) bool { return strings.HasPrefix(k, name+"\x00") }
	maps.DeleteFunc(m.entities, func(k string, _ admin.Entity) bool { return in(k) })
	maps.DeleteFunc(m.limits, func(k string, _ map[string]tokenbucket.Limit) bool { return in(k) })
	maps.DeleteFunc(m.snaps, func(k string, _ admin.UsageSnapshot) bool { return in(k) })
	m.audit = slices.DeleteFunc(m.audit, func(a auditEntry) bool { return a.ns == name })
	done(n)
	if !ok {
		ns = admin.Namespace{Name: name, ID: fmt.Sprintf("%012x", len(m.registry)+1)}
	}
	before := "state=" + ns.State
	ns.State, ns.Changed = admin.NamespacePurged, time.Now()
	m.registry[name] = ns
	m.record(ctx, name, admin.Scope{System: true}, "namespace.purge", before, fmt.Sprintf("state=purged, deleted %d items", n))
	return n, nil
}

// windowStart is the start of the window of w holding at.
func windowStart(w admin.Window, at time.Time) time.Time {
	at = at.UTC()
	switch w {
	case admin.Hourly:
		return at.Truncate(time.Hour)
	case admin.Monthly:
		return time.Date(at.Year(), at.Month(), 1, 0, 0, 0, 0, time.UTC)
	}
	return time.Date(at.Year(), at.Month(), at.Day(), 0, 0, 0, 0, time.UTC)
}

// addUsage adds what entity consumed at at to the snapshot of each window
// holding it.
func (m *mapStore) addUsage(_ context.Context, ns, entity, resource, limit string, at time.Time, mt int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, w := range []admin.Window{admin.Hourly, admin.Daily, admin.Monthly} {
		start := windowStart(w, at)
		k := key(ns, entity, resource, string(w), start.Format(time.RFC3339))
		sn, ok := m.snaps[k]
		if !ok {
			sn = admin.UsageSnapshot{Namespace: ns, Entity: entity, Resource: resource, Window: w, Start: start, Limits: map[string]int64{}}
		}
		sn.Limits[limit] += mt
		m.snaps[k] = sn
	}
	return nil
}

// WindowUsage ranks from every snapshot of the window: the map holds
// them all.
func (m *mapStore) WindowUsage(_ context.Context, ns, resource string, w admin.Window, at time.Time) ([]admin.UsageSnapshot, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	start := windowStart(w, at)
	var out []admin.UsageSnapshot
	for _, sn := range m.snaps {
		if sn.Namespace == m.nsOr(ns) && sn.Resource == resource && sn.Window == w && sn.Start.Equal(start) {
			sn.Limits = maps.Clone(sn.Limits)
			out = append(out, sn)
		}
	}
	return out, true, nil
}

func (m *mapStore) Usage(_ context.Context, ns, entity, resource string, w admin.Window, since time.Time) ([]admin.UsageSnapshot, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	from := windowStart(w, since)
	var out []admin.UsageSnapshot
	for _, sn := range m.snaps {
		if sn.Namespace == m.nsOr(ns) && sn.Entity == entity && (resource == "" || sn.Resource == resource) && sn.Window == w && !sn.Start.Before(from) {
			sn.Limits = maps.Clone(sn.Limits)
			out = append(out, sn)
		}
	}
	slices.SortFunc(out, func(a, b admin.UsageSnapshot) int {
		if c := a.Start.Compare(b.Start); c != 0 {
			return c
		}
		return strings.Compare(a.Resource, b.Resource)
	})
	return out, nil
}
