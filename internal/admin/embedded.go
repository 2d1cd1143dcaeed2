package admin

import (
	"context"
	"fmt"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/dynalimit/dynalimit/internal/memstore"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// Embedded returns the embedded store st as the operator's commands see
// it: buckets only (show, reset, top-up), each a bucket of one shard, no
// stored hierarchy, no usage counters; a reset or top-up is audited by a
// log line on log naming PrincipalOf(ctx) (the store keeps no audit
// records). namespace is the store's (NAMESPACE), a key's when it names
// none. Every other verb answers ErrUnsupported.
func Embedded(st *memstore.Store, namespace string, log *logrus.Entry) Stores {
	return Stores{
		Name: embeddedName, Instead: "use BACKEND_TYPE=dynamodb or redis",
		Buckets: embedded{st: st, namespace: namespace, log: log},
	}
}

// embeddedName names the embedded store in errors.
const embeddedName = "the embedded store (BACKEND_TYPE=memory)"

// embedded is the embedded store's Buckets.
type embedded struct {
	st        *memstore.Store
	namespace string // NAMESPACE: the key's namespace when it names none
	log       *logrus.Entry
}

var _ Buckets = embedded{}

func (m embedded) Bucket(ctx context.Context, key cascade.Key, limits map[string]tokenbucket.Limit) (BucketState, error) {
	levels, at, err := m.st.Inspect(ctx, key, limits)
	if err != nil {
		return BucketState{}, err
	}
	return m.state(key, levels, at), nil
}

func (m embedded) ResetBucket(ctx context.Context, key cascade.Key, limits map[string]tokenbucket.Limit) (BucketState, bool, error) {
	levels, reset, err := m.st.Reset(ctx, key, limits)
	if err != nil {
		return BucketState{}, false, err
	}
	before := m.state(key, levels, time.Now())
	if reset {
		m.log.WithFields(logrus.Fields{
			"action": "bucket.reset", "principal": PrincipalOf(ctx), "namespace": before.Key.Namespace,
			"entity": key.Entity, "resource": key.Resource, "before": holdings(before),
		}).Info("bucket reset to full")
	}
	return before, reset, nil
}

func (m embedded) TopUp(ctx context.Context, key cascade.Key, name string, amount tokenbucket.Millitokens, limits map[string]tokenbucket.Limit) (BucketState, bool, error) {
	levels, ok, err := m.st.TopUp(ctx, key, name, amount, limits)
	if err != nil {
		return BucketState{}, false, err
	}
	before := m.state(key, levels, time.Now())
	l, held := before.Total()[name]
	if !held {
		return before, false, fmt.Errorf("%w: %q", ErrNoSuchLimit, name)
	}
	ok = ok && l.Tokens < l.Limit.Capacity // full: nothing topped up
	if ok {
		m.log.WithFields(logrus.Fields{
			"action": "bucket.topup", "principal": PrincipalOf(ctx), "namespace": before.Key.Namespace,
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
func (m embedded) state(key cascade.Key, levels []memstore.LimitLevel, at time.Time) BucketState {
	if key.Namespace == "" {
		key.Namespace = m.namespace
	}
	sh := ShardState{}
	for _, l := range levels {
		sh.Exists = sh.Exists || l.Stored
		sh.Limits = append(sh.Limits, LimitState{Name: l.Name, Limit: l.Limit, Tokens: l.Tokens, FullIn: l.FullIn, Stored: l.Stored})
	}
	return BucketState{Key: key, ShardCount: 1, Shards: []ShardState{sh}, At: at}
}
