package admin

import (
	"errors"

	"github.com/dynalimit/dynalimit/pkg/dynamo"
	dadmin "github.com/dynalimit/dynalimit/pkg/dynamo/admin"
	"github.com/dynalimit/dynalimit/pkg/dynamo/usage"
)

// DynamoDB's records and errors, as the seams carry them.

// fromDynamo is err with the seams' sentinel of the pkg/dynamo sentinel
// it wraps, if any.
func fromDynamo(err error) error {
	for _, m := range []struct{ dyn, ours error }{
		{dynamo.ErrNotFound, ErrNotFound},
		{dadmin.ErrNamespaceActive, ErrNamespaceActive},
		{dadmin.ErrNoSuchLimit, ErrNoSuchLimit},
	} {
		if errors.Is(err, m.dyn) {
			return &translated{m.ours, err}
		}
	}
	return err
}

// translated is an error of a store that also wraps the seams' sentinel
// for it; its text is the store's.
type translated struct{ sentinel, err error }

func (t *translated) Error() string   { return t.err.Error() }
func (t *translated) Unwrap() []error { return []error{t.sentinel, t.err} }

// each is f of every element of in.
func each[A, B any](in []A, f func(A) B) []B {
	if in == nil {
		return nil
	}
	out := make([]B, len(in))
	for i, a := range in {
		out[i] = f(a)
	}
	return out
}

func bucketOf(b dadmin.BucketState) BucketState {
	return BucketState{Key: b.Key, ShardCount: b.ShardCount, At: b.At, Shards: each(b.Shards, func(sh dadmin.ShardState) ShardState {
		return ShardState{Shard: sh.Shard, Exists: sh.Exists, Limits: each(sh.Limits, func(l dadmin.LimitState) LimitState { return LimitState(l) })}
	})}
}

func chainLevelsOf(levels []dadmin.ChainLevel) []ChainLevel {
	return each(levels, func(l dadmin.ChainLevel) ChainLevel {
		return ChainLevel{Entity: Entity(l.Entity), Stored: l.Stored, Limits: l.Limits, Scope: Scope(l.Scope)}
	})
}

func usageOf(s usage.Snapshot) UsageSnapshot {
	return UsageSnapshot{Namespace: s.Namespace, Entity: s.Entity, Resource: s.Resource, Window: Window(s.Window), Start: s.Start, Limits: s.Limits}
}
