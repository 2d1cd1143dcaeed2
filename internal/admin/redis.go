package admin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/dynalimit/dynalimit/internal/redisstore"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// RedisStore is what the operator's commands need of the Redis store:
// *redisstore.Store, or *redisstore.Split when REDIS_PERSECOND splits it.
type RedisStore interface {
	Bucket(ctx context.Context, key cascade.Key, limits map[string]tokenbucket.Limit) (redisstore.Levels, error)
	Reset(ctx context.Context, key cascade.Key, limits map[string]tokenbucket.Limit) (redisstore.Levels, bool, error)
	TopUp(ctx context.Context, key cascade.Key, name string, amount tokenbucket.Millitokens, limits map[string]tokenbucket.Limit) (redisstore.Levels, bool, error)
	Usage(ctx context.Context, ns, entity, resource string, w byte, since time.Time) ([]redisstore.Snapshot, error)
	WindowUsage(ctx context.Context, ns, resource string, w byte, at time.Time) ([]redisstore.Snapshot, bool, error)
	// Namespaces is the registry and the lifecycle of the namespaces.
	Namespaces() *redisstore.Namespaces
	RedisRecords
}

var (
	_ RedisStore = (*redisstore.Store)(nil)
	_ RedisStore = (*redisstore.Split)(nil)
)

// Redis returns the Redis store st as the operator's commands see it:
// buckets (show, reset, top-up; each a bucket of one shard), entity
// records and stored limits, the audit records of every write (naming
// PrincipalOf(ctx); a reset or top-up is also logged on log), the
// namespace registry and lifecycle, and the usage history its decisions
// count: every job. namespace is the store's (NAMESPACE), a key's when it
// names none.
func Redis(st RedisStore, namespace string, log *logrus.Entry) Stores {
	r := redisOps{st: st, namespace: namespace, log: log}
	return Stores{
		Name:    "the Redis store (BACKEND_TYPE=redis)",
		Buckets: r, Entities: r, Audit: r, Namespaces: r, Usage: r,
	}
}

// redisOps is the Redis store's Buckets, Entities, Audit, Namespaces and
// Usage.
type redisOps struct {
	st        RedisStore
	namespace string // NAMESPACE: the key's namespace when it names none
	log       *logrus.Entry
}

var (
	_ Buckets  = redisOps{}
	_ Entities = redisOps{}
	_ Audit    = redisOps{}
	_ Usage    = redisOps{}
)

func (r redisOps) Bucket(ctx context.Context, key cascade.Key, limits map[string]tokenbucket.Limit) (BucketState, error) {
	lv, err := r.st.Bucket(ctx, key, limits)
	if err != nil {
		return BucketState{}, err
	}
	return r.state(key, lv), nil
}

func (r redisOps) ResetBucket(ctx context.Context, key cascade.Key, limits map[string]tokenbucket.Limit) (BucketState, bool, error) {
	lv, reset, err := r.st.Reset(ctx, key, limits)
	if err != nil {
		return BucketState{}, false, err
	}
	before := r.state(key, lv)
	if reset {
		r.log.WithFields(logrus.Fields{
			"action": "bucket.reset", "principal": PrincipalOf(ctx), "namespace": before.Key.Namespace,
			"entity": key.Entity, "resource": key.Resource, "before": holdings(before),
		}).Info("bucket reset to full")
		if err := r.record(ctx, redisstore.Scope{Namespace: key.Namespace, Entity: key.Entity, Resource: key.Resource}, "bucket.reset", holdings(before), "full"); err != nil {
			return before, reset, err
		}
	}
	return before, reset, nil
}

func (r redisOps) TopUp(ctx context.Context, key cascade.Key, name string, amount tokenbucket.Millitokens, limits map[string]tokenbucket.Limit) (BucketState, bool, error) {
	lv, ok, err := r.st.TopUp(ctx, key, name, amount, limits)
	if errors.Is(err, redisstore.ErrNoSuchLimit) {
		return r.state(key, lv), false, fmt.Errorf("%w: %q", ErrNoSuchLimit, name)
	}
	if err != nil {
		return BucketState{}, false, err
	}
	before := r.state(key, lv)
	if ok {
		r.log.WithFields(logrus.Fields{
			"action": "bucket.topup", "principal": PrincipalOf(ctx), "namespace": before.Key.Namespace,
			"entity": key.Entity, "resource": key.Resource, "before": holdings(before), "limit": name, "amount": tokens(amount),
		}).Info("bucket topped up")
		if err := r.record(ctx, redisstore.Scope{Namespace: key.Namespace, Entity: key.Entity, Resource: key.Resource}, "bucket.topup", holdings(before), name+"+"+tokens(amount)); err != nil {
			return before, ok, err
		}
	}
	return before, ok, nil
}

// Ancestors implements Buckets: the stored ancestors key's debits
// cascade to.
func (r redisOps) Ancestors(ctx context.Context, key cascade.Key, max int) ([]cascade.Ancestor, error) {
	return r.st.Ancestors(ctx, key, max)
}

// state is lv as a bucket of one shard.
func (r redisOps) state(key cascade.Key, lv redisstore.Levels) BucketState {
	if key.Namespace == "" {
		key.Namespace = r.namespace
	}
	sh := ShardState{}
	for _, l := range lv.Limits {
		sh.Exists = sh.Exists || l.Stored
		sh.Limits = append(sh.Limits, LimitState{Name: l.Name, Limit: l.Limit, Tokens: l.Tokens, FullIn: l.FullIn, Stored: l.Stored})
	}
	return BucketState{Key: key, ShardCount: 1, Shards: []ShardState{sh}, At: lv.At}
}

// Usage implements Usage.
func (r redisOps) Usage(ctx context.Context, ns, entity, resource string, w Window, since time.Time) ([]UsageSnapshot, error) {
	kind, ok := redisWindows[w]
	if !ok {
		return nil, fmt.Errorf("usage: no %q window (hourly, daily, monthly)", w)
	}
	snaps, err := r.st.Usage(ctx, ns, entity, resource, kind, since)
	if err != nil {
		return nil, err
	}
	return each(snaps, func(s redisstore.Snapshot) UsageSnapshot {
		return UsageSnapshot{Namespace: s.Namespace, Entity: s.Entity, Resource: s.Resource, Window: w, Start: s.Start, Limits: s.Limits}
	}), nil
}

// WindowUsage implements Usage: a bounded SCAN of every master
// (redisstore.Store.WindowUsage).
func (r redisOps) WindowUsage(ctx context.Context, ns, resource string, w Window, at time.Time) ([]UsageSnapshot, bool, error) {
	kind, ok := redisWindows[w]
	if !ok {
		return nil, false, fmt.Errorf("usage: no %q window (hourly, daily, monthly)", w)
	}
	snaps, complete, err := r.st.WindowUsage(ctx, ns, resource, kind, at)
	if err != nil {
		return nil, false, err
	}
	return each(snaps, func(s redisstore.Snapshot) UsageSnapshot {
		return UsageSnapshot{Namespace: s.Namespace, Entity: s.Entity, Resource: s.Resource, Window: w, Start: s.Start, Limits: s.Limits}
	}), complete, nil
}

// redisWindows are the usage windows as the Redis store names them.
var redisWindows = map[Window]byte{Hourly: redisstore.Hourly, Daily: redisstore.Daily, Monthly: redisstore.Monthly}
