package admin

import (
	"context"
	"strconv"

	"github.com/dynalimit/dynalimit/internal/redisstore"
)

// The Redis store's namespace registry and lifecycle
// (redisstore.Namespaces), each change audited in the namespace's system
// trail under PrincipalOf(ctx), as DynamoDB audits them.

var _ Namespaces = redisOps{}

// systemOf is the system scope of namespace name, where its lifecycle is
// audited.
func systemOf(name string) redisstore.Scope { return redisstore.Scope{Namespace: name, System: true} }

// RegisterNamespace implements Namespaces.
func (r redisOps) RegisterNamespace(ctx context.Context, name string) (Namespace, error) {
	ns, created, err := r.st.Namespaces().Register(ctx, name)
	if err != nil {
		return Namespace{}, fromRedis(err)
	}
	if created {
		if err := r.record(ctx, systemOf(name), "namespace.register", "", "name="+name+" id="+ns.ID); err != nil {
			return Namespace(ns), err
		}
	}
	return Namespace(ns), nil
}

// Namespaces implements Namespaces.
func (r redisOps) Namespaces(ctx context.Context) ([]Namespace, error) {
	nss, err := r.st.Namespaces().List(ctx)
	return each(nss, func(ns redisstore.Namespace) Namespace { return Namespace(ns) }), fromRedis(err)
}

// Namespace implements Namespaces.
func (r redisOps) Namespace(ctx context.Context, name string) (Namespace, error) {
	ns, err := r.st.Namespaces().Get(ctx, name)
	return Namespace(ns), fromRedis(err)
}

// DeleteNamespace implements Namespaces.
func (r redisOps) DeleteNamespace(ctx context.Context, name string) (bool, error) {
	return r.lifecycle(ctx, name, "namespace.delete", NamespaceDeleted, r.st.Namespaces().Delete)
}

// RecoverNamespace implements Namespaces.
func (r redisOps) RecoverNamespace(ctx context.Context, name string) (bool, error) {
	return r.lifecycle(ctx, name, "namespace.recover", NamespaceActive, r.st.Namespaces().Recover)
}

// lifecycle moves name to state to by change, and audits it as action
// when it moved.
func (r redisOps) lifecycle(ctx context.Context, name, action, to string, change func(context.Context, string) (redisstore.Namespace, bool, error)) (bool, error) {
	before, moved, err := change(ctx, name)
	if err != nil || !moved {
		return false, fromRedis(err)
	}
	return true, r.record(ctx, systemOf(name), action, "state="+before.State, "state="+to)
}

// Orphans implements Namespaces.
func (r redisOps) Orphans(ctx context.Context) ([]Orphan, error) {
	os, err := r.st.Namespaces().Orphans(ctx)
	return each(os, func(o redisstore.Orphan) Orphan { return Orphan(o) }), fromRedis(err)
}

// PurgeNamespace implements Namespaces: an orphan is audited as
// registered, then purged.
func (r redisOps) PurgeNamespace(ctx context.Context, name string, done func(deleted int)) (int, error) {
	p, err := r.st.Namespaces().Purge(ctx, name, done)
	if err != nil {
		return p.Deleted, fromRedis(err)
	}
	before := "state=" + p.Was
	if p.Was == "" {
		before = "unregistered"
		if err := r.record(ctx, systemOf(name), "namespace.register", "", "name="+name+" id="+p.ID); err != nil {
			return p.Deleted, err
		}
	}
	return p.Deleted, r.record(ctx, systemOf(name), "namespace.purge", before, "state=purged, deleted "+strconv.Itoa(p.Deleted)+" items")
}
