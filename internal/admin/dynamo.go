package admin

import (
	"context"
	"sync"
	"time"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	dadmin "github.com/dynalimit/dynalimit/pkg/dynamo/admin"
	"github.com/dynalimit/dynalimit/pkg/dynamo/usage"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// Dynamo is DynamoDB as the operator's commands see it: every job, on one
// *dynamo.Store (the serving process's, or the one a command opened), its
// records and errors translated into the seams' (dynamorecords.go).
//
// pkg/dynamo names the principal of its audit records per store
// (dynamo.WithPrincipal): a write whose PrincipalOf(ctx) is not the
// store's goes through a store naming it, opened by the open function on
// the same client and kept for the next call (up to maxViews principals;
// past them, one is opened for the call and closed after it). So does
// the walk up a bucket's ancestors (Ancestors), which has the deadline of
// the store it runs on: the serving store's is a decision's, open's
// should be MinCallTimeout at least. Close closes those stores.
type Dynamo struct {
	store     func(ctx context.Context) (*dynamo.Store, error)
	principal string
	open      func(ctx context.Context, principal string) (*dynamo.Store, error)

	mu    sync.Mutex
	views map[string]*dynamo.Store
}

// maxViews bounds the stores Dynamo keeps, one per principal.
const maxViews = 32

// NewDynamo returns the operator's DynamoDB over the store store returns
// (it may wait for the store to open), whose audit records name
// principal. open, when set, opens a store naming another principal; nil
// writes every change under principal.
func NewDynamo(store func(context.Context) (*dynamo.Store, error), principal string, open func(ctx context.Context, principal string) (*dynamo.Store, error)) *Dynamo {
	return &Dynamo{store: store, principal: principal, open: open, views: map[string]*dynamo.Store{}}
}

// Stores is d for every job.
func (d *Dynamo) Stores() Stores {
	return Stores{Name: "DynamoDB", Buckets: d, Entities: d, Audit: d, Namespaces: d, Usage: d}
}

// Close closes the stores opened for other principals.
func (d *Dynamo) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for p, st := range d.views {
		_ = st.Close()
		delete(d.views, p)
	}
	return nil
}

// writer returns the store a write of ctx's principal goes through, and
// what to call when the write is done.
func (d *Dynamo) writer(ctx context.Context) (*dynamo.Store, func(), error) {
	p := PrincipalOf(ctx)
	if p == d.principal || d.open == nil {
		st, err := d.store(ctx)
		return st, func() {}, err
	}
	d.mu.Lock()
	st, ok := d.views[p]
	d.mu.Unlock()
	if ok {
		return st, func() {}, nil
	}
	st, err := d.open(ctx, p)
	if err != nil {
		return nil, nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if kept, ok := d.views[p]; ok { // opened meanwhile
		_ = st.Close()
		return kept, func() {}, nil
	}
	if len(d.views) >= maxViews {
		return st, func() { _ = st.Close() }, nil
	}
	d.views[p] = st
	return st, func() {}, nil
}

// write runs f on the store naming ctx's principal (writer).
func write[T any](ctx context.Context, d *Dynamo, f func(st *dynamo.Store) (T, error)) (T, error) {
	st, done, err := d.writer(ctx)
	if err != nil {
		var zero T
		return zero, err
	}
	defer done()
	v, err := f(st)
	return v, fromDynamo(err)
}

// read runs f on the store.
func read[T any](ctx context.Context, d *Dynamo, f func(st *dynamo.Store) (T, error)) (T, error) {
	st, err := d.store(ctx)
	if err != nil {
		var zero T
		return zero, err
	}
	v, err := f(st)
	return v, fromDynamo(err)
}

// stateAndOK is a write's bucket as it was and whether it changed.
type stateAndOK struct {
	b  BucketState
	ok bool
}

// Bucket implements Buckets.
func (d *Dynamo) Bucket(ctx context.Context, key cascade.Key, limits map[string]tokenbucket.Limit) (BucketState, error) {
	return read(ctx, d, func(st *dynamo.Store) (BucketState, error) {
		b, err := dadmin.New(st).Bucket(ctx, key, limits)
		return bucketOf(b), err
	})
}

// ResetBucket implements Buckets.
func (d *Dynamo) ResetBucket(ctx context.Context, key cascade.Key, limits map[string]tokenbucket.Limit) (BucketState, bool, error) {
	r, err := write(ctx, d, func(st *dynamo.Store) (stateAndOK, error) {
		b, ok, err := dadmin.New(st).ResetBucket(ctx, key, limits)
		return stateAndOK{bucketOf(b), ok}, err
	})
	return r.b, r.ok, err
}

// TopUp implements Buckets.
func (d *Dynamo) TopUp(ctx context.Context, key cascade.Key, name string, amount tokenbucket.Millitokens, limits map[string]tokenbucket.Limit) (BucketState, bool, error) {
	r, err := write(ctx, d, func(st *dynamo.Store) (stateAndOK, error) {
		b, ok, err := dadmin.New(st).TopUp(ctx, key, name, amount, limits)
		return stateAndOK{bucketOf(b), ok}, err
	})
	return r.b, r.ok, err
}

// Ancestors implements Buckets.
func (d *Dynamo) Ancestors(ctx context.Context, key cascade.Key, max int) ([]cascade.Ancestor, error) {
	return write(ctx, d, func(st *dynamo.Store) ([]cascade.Ancestor, error) { return st.Ancestors(ctx, key, max) })
}

// PutEntity implements Entities.
func (d *Dynamo) PutEntity(ctx context.Context, e Entity) error {
	_, err := write(ctx, d, func(st *dynamo.Store) (struct{}, error) {
		return struct{}{}, dadmin.New(st).PutEntity(ctx, dynamo.Entity(e))
	})
	return err
}

// Entity implements Entities.
func (d *Dynamo) Entity(ctx context.Context, ns, id string) (Entity, error) {
	return read(ctx, d, func(st *dynamo.Store) (Entity, error) {
		e, err := dadmin.New(st).Entity(ctx, ns, id)
		return Entity(e), err
	})
}

// Children implements Entities.
func (d *Dynamo) Children(ctx context.Context, ns, id string) ([]string, error) {
	return read(ctx, d, func(st *dynamo.Store) ([]string, error) { return dadmin.New(st).Children(ctx, ns, id) })
}

// Chain implements Entities.
func (d *Dynamo) Chain(ctx context.Context, ns, id, resource string) ([]ChainLevel, bool, error) {
	var cycle bool
	levels, err := read(ctx, d, func(st *dynamo.Store) ([]ChainLevel, error) {
		l, c, err := dadmin.New(st).Chain(ctx, ns, id, resource)
		cycle = c
		return chainLevelsOf(l), err
	})
	return levels, cycle, err
}

// SetLimits implements Entities.
func (d *Dynamo) SetLimits(ctx context.Context, sc Scope, limits map[string]tokenbucket.Limit) error {
	_, err := write(ctx, d, func(st *dynamo.Store) (struct{}, error) {
		return struct{}{}, dadmin.New(st).SetLimits(ctx, dadmin.Scope(sc), limits)
	})
	return err
}

// Limits implements Entities.
func (d *Dynamo) Limits(ctx context.Context, sc Scope) (map[string]tokenbucket.Limit, error) {
	return read(ctx, d, func(st *dynamo.Store) (map[string]tokenbucket.Limit, error) {
		return dadmin.New(st).Limits(ctx, dadmin.Scope(sc))
	})
}

// DeleteLimits implements Entities.
func (d *Dynamo) DeleteLimits(ctx context.Context, sc Scope, names ...string) error {
	_, err := write(ctx, d, func(st *dynamo.Store) (struct{}, error) {
		return struct{}{}, dadmin.New(st).DeleteLimits(ctx, dadmin.Scope(sc), names...)
	})
	return err
}

// Audit implements Audit.
func (d *Dynamo) Audit(ctx context.Context, sc Scope) ([]AuditRecord, error) {
	return read(ctx, d, func(st *dynamo.Store) ([]AuditRecord, error) {
		recs, err := dadmin.New(st).Audit(ctx, dadmin.Scope(sc))
		return each(recs, func(r dadmin.AuditRecord) AuditRecord { return AuditRecord(r) }), err
	})
}

// RegisterNamespace implements Namespaces.
func (d *Dynamo) RegisterNamespace(ctx context.Context, name string) (Namespace, error) {
	return write(ctx, d, func(st *dynamo.Store) (Namespace, error) {
		ns, err := dadmin.New(st).RegisterNamespace(ctx, name)
		return Namespace(ns), err
	})
}

// Namespaces implements Namespaces.
func (d *Dynamo) Namespaces(ctx context.Context) ([]Namespace, error) {
	return read(ctx, d, func(st *dynamo.Store) ([]Namespace, error) {
		nss, err := dadmin.New(st).Namespaces(ctx)
		return each(nss, func(ns dadmin.Namespace) Namespace { return Namespace(ns) }), err
	})
}

// Namespace implements Namespaces.
func (d *Dynamo) Namespace(ctx context.Context, name string) (Namespace, error) {
	return read(ctx, d, func(st *dynamo.Store) (Namespace, error) {
		ns, err := dadmin.New(st).Namespace(ctx, name)
		return Namespace(ns), err
	})
}

// DeleteNamespace implements Namespaces.
func (d *Dynamo) DeleteNamespace(ctx context.Context, name string) (bool, error) {
	return write(ctx, d, func(st *dynamo.Store) (bool, error) { return dadmin.New(st).DeleteNamespace(ctx, name) })
}

// RecoverNamespace implements Namespaces.
func (d *Dynamo) RecoverNamespace(ctx context.Context, name string) (bool, error) {
	return write(ctx, d, func(st *dynamo.Store) (bool, error) { return dadmin.New(st).RecoverNamespace(ctx, name) })
}

// Orphans implements Namespaces.
func (d *Dynamo) Orphans(ctx context.Context) ([]Orphan, error) {
	return read(ctx, d, func(st *dynamo.Store) ([]Orphan, error) {
		os, err := dadmin.New(st).Orphans(ctx)
		return each(os, func(o dadmin.Orphan) Orphan { return Orphan(o) }), err
	})
}

// PurgeNamespace implements Namespaces.
func (d *Dynamo) PurgeNamespace(ctx context.Context, name string, done func(deleted int)) (int, error) {
	return write(ctx, d, func(st *dynamo.Store) (int, error) { return dadmin.New(st).PurgeNamespace(ctx, name, done) })
}

// Usage implements Usage.
func (d *Dynamo) Usage(ctx context.Context, ns, entity, resource string, w Window, since time.Time) ([]UsageSnapshot, error) {
	return read(ctx, d, func(st *dynamo.Store) ([]UsageSnapshot, error) {
		snaps, err := usage.Of(st).Usage(ctx, ns, entity, resource, usage.Window(w), since)
		return each(snaps, usageOf), err
	})
}

// WindowUsage implements Usage: a bounded Scan of the table
// (usage.Store.WindowUsage).
func (d *Dynamo) WindowUsage(ctx context.Context, ns, resource string, w Window, at time.Time) ([]UsageSnapshot, bool, error) {
	var complete bool
	snaps, err := read(ctx, d, func(st *dynamo.Store) ([]UsageSnapshot, error) {
		snaps, ok, err := usage.Of(st).WindowUsage(ctx, ns, resource, usage.Window(w), at, 0)
		complete = ok
		return each(snaps, usageOf), err
	})
	return snaps, complete, err
}

var (
	_ Buckets    = (*Dynamo)(nil)
	_ Entities   = (*Dynamo)(nil)
	_ Audit      = (*Dynamo)(nil)
	_ Namespaces = (*Dynamo)(nil)
	_ Usage      = (*Dynamo)(nil)
)
