package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/sirupsen/logrus"

	"github.com/dynalimit/dynalimit/internal/adjust"
	"github.com/dynalimit/dynalimit/internal/admin"
	"github.com/dynalimit/dynalimit/internal/config"
	"github.com/dynalimit/dynalimit/internal/degrade"
	"github.com/dynalimit/dynalimit/internal/metrics"
	"github.com/dynalimit/dynalimit/internal/service"
	"github.com/dynalimit/dynalimit/internal/tracing"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/warm"
)

// dynamoBackend is the DynamoDB store (BACKEND_TYPE=dynamodb). It is
// returned at once; Warmup opens the table and warms it up, and decisions
// before then wait for it within BACKEND_TIMEOUT (warming). Its background
// work follows the namespace registry.
type dynamoBackend struct {
	w      *warming
	warmup warmup
	// gate holds the namespaces the registry marks deleted.
	gate registryWatch
	log  *logrus.Entry
	// ops is the admin API's view of the serving store.
	ops *admin.Dynamo
}

var (
	_ backend = (*dynamoBackend)(nil)
	_ warmer  = (*dynamoBackend)(nil)
)

// openDynamo returns the DynamoDB backend, degraded under
// ON_UNAVAILABLE=local.
func openDynamo(ctx context.Context, o backendOptions) (backend, error) {
	s := o.settings
	client, err := dynamo.NewClient(ctx, s.DynamoDBEndpoint, s.AWSRegion, metrics.DynamoDBLate(o.reg, o.late.Late), tracing.DynamoDB(o.tracing))
	if err != nil {
		return nil, fmt.Errorf("dynamodb client: %w", err)
	}
	cfg := s.DynamoConfig()
	// Under local, an item DynamoDB keeps throttling is decided on the
	// replica's share, not refused as contended.
	cfg.ThrottleFails = s.OnUnavailable == config.OnUnavailableLocal
	log := o.log.WithFields(logrus.Fields{"table": s.DynamoDBTable, "namespace": s.Namespace, "endpoint": s.DynamoDBEndpoint, "region": s.AWSRegion})
	w := &warming{wait: s.BackendTimeout}
	metrics.RegisterDynamoCaches(o.reg, func() []dynamo.CacheStats {
		if st := w.opened(); st != nil {
			return st.CacheStats()
		}
		return nil
	})
	b := &dynamoBackend{
		w: w,
		warmup: warmup{
			open: func(ctx context.Context) (*dynamo.Store, error) {
				return dynamo.NewStore(ctx, client, cfg, dynamo.WithLogger(log), dynamo.WithObserver(metrics.DynamoObserver(o.reg)), dynamo.WithCallContext(tracing.CallContext))
			},
			options: warm.Options{Credentials: client.Options().Credentials},
			window:  s.BackendWarmupTimeout,
			explain: func(err error) error { return admin.Explain(err, s) },
			log:     log,
		},
		gate: newRegistryWatch(s.Namespace, o.names, cfg.WithDefaults().ConfigCacheTTL, log),
		log:  log,
	}
	// The admin API runs on the serving store; a write naming a principal
	// goes through a store of that principal on the same client, with an
	// operator's deadline.
	opsCfg := cfg
	opsCfg.Timeout = max(s.BackendTimeout, admin.MinCallTimeout)
	b.ops = admin.NewDynamo(b.DynamoDB, "", func(ctx context.Context, principal string) (*dynamo.Store, error) {
		return dynamo.NewStore(ctx, client, opsCfg, dynamo.WithLogger(log), dynamo.WithCallContext(tracing.CallContext), dynamo.WithPrincipal(principal))
	})
	if s.OnUnavailable == config.OnUnavailableLocal {
		return degraded(b, s, o.reg, o.late, b.log), nil
	}
	return b, nil
}

// Store is the store, waited for while it opens (warming).
func (b *dynamoBackend) Store() service.Store { return b.w }

// shared is the store, waited for while it opens (degrade.Shared).
func (b *dynamoBackend) shared() degrade.Shared { return b.w }

// heart is the store once it is open; nil if ctx ends first.
func (b *dynamoBackend) heart(ctx context.Context) degrade.Heart {
	if st := b.w.await(ctx); st != nil {
		return st
	}
	return nil
}

// Settler is the store, waited for while it opens.
func (b *dynamoBackend) Settler() adjust.Settler { return b.w }

// Hierarchy is the store's entities, waited for while it opens.
func (b *dynamoBackend) Hierarchy() service.Hierarchy { return b.w }

// Gate is the namespaces the registry marks deleted, as Run last read them.
func (b *dynamoBackend) Gate() service.NamespaceGate { return b.gate.deleted }

// warmupCondition is what health awaits while the store warms up.
func (b *dynamoBackend) warmupCondition() string { return dynamoWarmup }

// Warmup opens the store and warms it up (see warmup.run).
func (b *dynamoBackend) Warmup(ctx context.Context) error { return b.warmup.run(ctx, b.w) }

// Run follows the namespace registry until ctx ends (watchNamespaces).
func (b *dynamoBackend) Run(ctx context.Context) error { return b.watchNamespaces(ctx) }

// Close closes the admin API's stores and the store, if it opened.
func (b *dynamoBackend) Close() error { return errors.Join(b.ops.Close(), b.w.close()) }

// Operator is the serving store as the operator's commands see it.
func (b *dynamoBackend) Operator() admin.Stores { return b.ops.Stores() }

// DynamoDB is the serving store, once open: it waits for it within
// BACKEND_TIMEOUT, as a decision does, and fails as DynamoDB not answering
// if it is still not open. The admin API calls the table through it.
func (b *dynamoBackend) DynamoDB(ctx context.Context) (*dynamo.Store, error) {
	if st := b.w.store(ctx); st != nil {
		return st, nil
	}
	return nil, errWarming
}
