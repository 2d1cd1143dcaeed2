package admin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/dynalimit/dynalimit/internal/memstore"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// embedded is the embedded store as bucket show and reset see it: a
// bucket of one shard, no stored hierarchy, no usage counters. A reset is
// audited by a log line (the store keeps no audit records).
type embedded struct {
	st        *memstore.Store
	namespace string // NAMESPACE: the key's namespace when it names none
	principal string
	log       *logrus.Entry
}

var _ Buckets = embedded{}

func (m embedded) Bucket(ctx context.Context, key cascade.Key, limits map[string]tokenbucket.Limit) (dynamo.BucketState, error) {
	levels, at, err := m.st.Inspect(ctx, key, limits)
	if err != nil {
		return dynamo.BucketState{}, err
	}
	return m.state(key, levels, at), nil
}

func (m embedded) ResetBucket(ctx context.Context, key cascade.Key, limits map[string]tokenbucket.Limit) (dynamo.BucketState, bool, error) {
	levels, reset, err := m.st.Reset(ctx, key, limits)
	if err != nil {
		return dynamo.BucketState{}, false, err
	}
	before := m.state(key, levels, time.Now())
	if reset {
		m.log.WithFields(logrus.Fields{
			"action": "bucket.reset", "principal": m.principal, "namespace": before.Key.Namespace,
			"entity": key.Entity, "resource": key.Resource, "before": holdings(before),
		}).Info("bucket reset to full")
	}
	return before, reset, nil
}

func (m embedded) TopUp(ctx context.Context, key cascade.Key, name string, amount tokenbucket.Millitokens, limits map[string]tokenbucket.Limit) (dynamo.BucketState, bool, error) {
	levels, ok, err := m.st.TopUp(ctx, key, name, amount, limits)
	if err != nil {
		return dynamo.BucketState{}, false, err
	}
	before := m.state(key, levels, time.Now())
	if _, held := before.Total()[name]; !held {
		return before, false, fmt.Errorf("%w: %q", dynamo.ErrNoSuchLimit, name)
	}
	if ok {
		m.log.WithFields(logrus.Fields{
			"action": "bucket.topup", "principal": m.principal, "namespace": before.Key.Namespace,
			"entity": key.Entity, "resource": key.Resource, "before": holdings(before), "limit": name, "amount": tokens(amount),
		}).Info("bucket topped up")
	}
	return before, ok, nil
}

// Ancestors returns none: the embedded store keeps no entities, its chains
// are the configuration's alone.
func (embedded) Ancestors(context.Context, cascade.Key, int) ([]cascade.Ancestor, error) {
	return nil, nil
}

// state is levels, read at at, as a bucket of one shard.
func (m embedded) state(key cascade.Key, levels []memstore.LimitLevel, at time.Time) dynamo.BucketState {
	if key.Namespace == "" {
		key.Namespace = m.namespace
	}
	sh := dynamo.ShardState{}
	for _, l := range levels {
		sh.Exists = sh.Exists || l.Stored
		sh.Limits = append(sh.Limits, dynamo.LimitState{Name: l.Name, Limit: l.Limit, Tokens: l.Tokens, FullIn: l.FullIn, Stored: l.Stored})
	}
	return dynamo.BucketState{Key: key, ShardCount: 1, Shards: []dynamo.ShardState{sh}, At: at}
}

// errEmbedded is the answer of a command the embedded store cannot run.
var errEmbedded = errors.New("admin: the embedded store (BACKEND_TYPE=memory) has no usage, audit records or namespace registry: only bucket show and bucket reset run on it")
