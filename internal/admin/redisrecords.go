package admin

import (
	"context"
	"errors"
	"fmt"

	"github.com/dynalimit/dynalimit/internal/redisstore"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	dadmin "github.com/dynalimit/dynalimit/pkg/dynamo/admin"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// RedisRecords is what the entity, limits and audit commands need of the
// Redis store: its entity records, stored limits and audit trails.
type RedisRecords interface {
	Ancestors(ctx context.Context, key cascade.Key, max int) ([]cascade.Ancestor, error)
	Entity(ctx context.Context, ns, id string) (redisstore.Entity, error)
	PutEntity(ctx context.Context, e redisstore.Entity) (redisstore.Entity, bool, error)
	Children(ctx context.Context, ns, id string) ([]string, error)
	Chain(ctx context.Context, ns, id, resource string) ([]redisstore.ChainLevel, bool, error)
	Limits(ctx context.Context, sc redisstore.Scope) (map[string]tokenbucket.Limit, error)
	SetLimits(ctx context.Context, sc redisstore.Scope, limits map[string]tokenbucket.Limit) (before, after map[string]tokenbucket.Limit, err error)
	DeleteLimits(ctx context.Context, sc redisstore.Scope, names ...string) (before, after map[string]tokenbucket.Limit, err error)
	Record(ctx context.Context, sc redisstore.Scope, r redisstore.AuditRecord) error
	Audit(ctx context.Context, sc redisstore.Scope) ([]redisstore.AuditRecord, error)
}

// fromRedis translates the store's ErrNotFound and ErrNamespaceActive
// into the seams'.
func fromRedis(err error) error {
	switch {
	case errors.Is(err, redisstore.ErrNotFound):
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	case errors.Is(err, redisstore.ErrNamespaceActive):
		return &translated{ErrNamespaceActive, err}
	}
	return err
}

// record adds an audit record of a write of ctx's principal at sc.
func (r redisOps) record(ctx context.Context, sc redisstore.Scope, action, before, after string) error {
	return r.st.Record(ctx, sc, redisstore.AuditRecord{
		Action: action, Scope: Scope(sc).String(), Before: before, After: after, Principal: PrincipalOf(ctx),
	})
}

// entityString is an entity record as its audit records tell it.
func entityString(e redisstore.Entity) string {
	return fmt.Sprintf("id=%q parent=%q cascade=%t", e.ID, e.Parent, e.Cascade)
}

// PutEntity implements Entities.
func (r redisOps) PutEntity(ctx context.Context, e Entity) error {
	for what, id := range map[string]string{"id": e.ID, "parent": e.Parent} {
		if id != "" {
			if err := dadmin.CheckEntityID(what, id); err != nil {
				return err
			}
		}
	}
	re := redisstore.Entity{Namespace: e.Namespace, ID: e.ID, Parent: e.Parent, Cascade: e.Cascade}
	before, existed, err := r.st.PutEntity(ctx, re)
	if err != nil {
		return fromRedis(err)
	}
	was := ""
	if existed {
		was = entityString(before)
	}
	return r.record(ctx, redisstore.Scope{Namespace: e.Namespace, Entity: e.ID}, "entity.put", was, entityString(re))
}

// Entity implements Entities.
func (r redisOps) Entity(ctx context.Context, ns, id string) (Entity, error) {
	e, err := r.st.Entity(ctx, ns, id)
	if err != nil {
		return Entity{}, fromRedis(err)
	}
	return Entity{Namespace: e.Namespace, ID: e.ID, Parent: e.Parent, Cascade: e.Cascade}, nil
}

// Children implements Entities.
func (r redisOps) Children(ctx context.Context, ns, id string) ([]string, error) {
	return r.st.Children(ctx, ns, id)
}

// Chain implements Entities.
func (r redisOps) Chain(ctx context.Context, ns, id, resource string) ([]ChainLevel, bool, error) {
	levels, cycle, err := r.st.Chain(ctx, ns, id, resource)
	return each(levels, func(l redisstore.ChainLevel) ChainLevel {
		e := l.Entity
		return ChainLevel{Entity: Entity{Namespace: e.Namespace, ID: e.ID, Parent: e.Parent, Cascade: e.Cascade}, Stored: l.Stored, Limits: l.Limits, Scope: Scope(l.Scope)}
	}), cycle, fromRedis(err)
}

// SetLimits implements Entities.
func (r redisOps) SetLimits(ctx context.Context, sc Scope, limits map[string]tokenbucket.Limit) error {
	before, after, err := r.st.SetLimits(ctx, redisstore.Scope(sc), limits)
	if err != nil {
		return fromRedis(err)
	}
	return r.record(ctx, redisstore.Scope(sc), "limits.set", dadmin.FormatLimits(before), dadmin.FormatLimits(after))
}

// Limits implements Entities.
func (r redisOps) Limits(ctx context.Context, sc Scope) (map[string]tokenbucket.Limit, error) {
	l, err := r.st.Limits(ctx, redisstore.Scope(sc))
	return l, fromRedis(err)
}

// DeleteLimits implements Entities.
func (r redisOps) DeleteLimits(ctx context.Context, sc Scope, names ...string) error {
	before, after, err := r.st.DeleteLimits(ctx, redisstore.Scope(sc), names...)
	if err != nil {
		return fromRedis(err)
	}
	return r.record(ctx, redisstore.Scope(sc), "limits.delete", dadmin.FormatLimits(before), dadmin.FormatLimits(after))
}

// Audit implements Audit.
func (r redisOps) Audit(ctx context.Context, sc Scope) ([]AuditRecord, error) {
	recs, err := r.st.Audit(ctx, redisstore.Scope(sc))
	return each(recs, func(a redisstore.AuditRecord) AuditRecord { return AuditRecord(a) }), fromRedis(err)
}
