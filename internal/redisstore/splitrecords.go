package redisstore

import (
	"context"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// The entities, stored limits and audit trails of a Split are Main's.

// Ancestors walks the stored ancestors on Main.
func (sp *Split) Ancestors(ctx context.Context, key cascade.Key, max int) ([]cascade.Ancestor, error) {
	return sp.Main.Ancestors(ctx, key, max)
}

// Entity reads an entity record on Main.
func (sp *Split) Entity(ctx context.Context, ns, id string) (Entity, error) {
	return sp.Main.Entity(ctx, ns, id)
}

// PutEntity writes an entity record on Main.
func (sp *Split) PutEntity(ctx context.Context, e Entity) (Entity, bool, error) {
	return sp.Main.PutEntity(ctx, e)
}

// Children lists an entity's children on Main.
func (sp *Split) Children(ctx context.Context, ns, id string) ([]string, error) {
	return sp.Main.Children(ctx, ns, id)
}

// Chain walks a stored chain on Main.
func (sp *Split) Chain(ctx context.Context, ns, id, resource string) ([]ChainLevel, bool, error) {
	return sp.Main.Chain(ctx, ns, id, resource)
}

// Limits reads the limits stored at sc on Main.
func (sp *Split) Limits(ctx context.Context, sc Scope) (map[string]tokenbucket.Limit, error) {
	return sp.Main.Limits(ctx, sc)
}

// SetLimits stores limits at sc on Main.
func (sp *Split) SetLimits(ctx context.Context, sc Scope, limits map[string]tokenbucket.Limit) (before, after map[string]tokenbucket.Limit, err error) {
	return sp.Main.SetLimits(ctx, sc, limits)
}

// DeleteLimits deletes limits at sc on Main.
func (sp *Split) DeleteLimits(ctx context.Context, sc Scope, names ...string) (before, after map[string]tokenbucket.Limit, err error) {
	return sp.Main.DeleteLimits(ctx, sc, names...)
}

// Record adds an audit record on Main.
func (sp *Split) Record(ctx context.Context, sc Scope, r AuditRecord) error {
	return sp.Main.Record(ctx, sc, r)
}

// Audit reads an audit trail on Main.
func (sp *Split) Audit(ctx context.Context, sc Scope) ([]AuditRecord, error) {
	return sp.Main.Audit(ctx, sc)
}
