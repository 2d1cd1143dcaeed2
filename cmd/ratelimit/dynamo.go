package main

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"

	"github.com/dynalimit/dynalimit/internal/admin"
	"github.com/dynalimit/dynalimit/internal/config"
	"github.com/dynalimit/dynalimit/internal/degrade"
	"github.com/dynalimit/dynalimit/internal/metrics"
	"github.com/dynalimit/dynalimit/internal/tracing"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	dadmin "github.com/dynalimit/dynalimit/pkg/dynamo/admin"
)

// openDynamo returns the DynamoDB store at once; its warmup opens the table
// and warms it up (see warmDynamo), and decisions before then are answered
// as DynamoDB not answering.
func openDynamo(ctx context.Context, s config.Settings, reg prometheus.Registerer, tp *tracing.Provider, log *logrus.Entry) (backend, error) {
	client, err := dynamo.NewClient(ctx, s.DynamoDBEndpoint, s.AWSRegion, metrics.DynamoDB(reg), tracing.DynamoDB(tp))
	if err != nil {
		return backend{}, fmt.Errorf("dynamodb client: %w", err)
	}
	cfg := s.DynamoConfig()
	// Under local, an item DynamoDB keeps throttling is decided on the
	// replica's share, not refused as contended.
	cfg.ThrottleFails = s.OnUnavailable == config.OnUnavailableLocal
	open := func(ctx context.Context) (*dynamo.Store, error) {
		return dynamo.NewStore(ctx, client, cfg, dynamo.WithLogger(log), dynamo.WithObserver(metrics.DynamoObserver(reg)), dynamo.WithCallContext(tracing.CallContext))
	}
	w := &warming{wait: s.BackendTimeout}
	metrics.RegisterDynamoCaches(reg, w.cacheStats)
	log = log.WithFields(logrus.Fields{"table": s.DynamoDBTable, "namespace": s.Namespace, "endpoint": s.DynamoDBEndpoint, "region": s.AWSRegion})
	b := backend{
		store:     w,
		hierarchy: w,
		settler:   w,
		warmup: func(ctx context.Context) error {
			return warmDynamo(ctx, w, open, dynamo.WarmOptions{Credentials: client.Options().Credentials}, s.BackendWarmupTimeout, func(err error) error { return admin.Explain(err, s) }, log)
		},
		close: w.close,
	}
	deleted := dadmin.NewDeletedNamespaces(s.Namespace)
	b.gate = deleted
	b.watch = func(ctx context.Context, names func() []string) error {
		return watchNamespaces(ctx, w, deleted, names, cfg.WithDefaults().ConfigCacheTTL, log)
	}
	if s.OnUnavailable == config.OnUnavailableLocal {
		degraded(&b, w, s, reg, log)
	}
	return b, nil
}

// heartbeatInterval is how often a replica records that it is alive
// (ON_UNAVAILABLE=local counts the fleet by it).
const heartbeatInterval = 5 * time.Second

// degraded makes b decide on this replica's share when DynamoDB cannot
// (ON_UNAVAILABLE=local): the store goes through internal/degrade, which
// settles up in the background, and the fleet is counted by heartbeats
// unless FLEET_SIZE fixes it.
func degraded(b *backend, w *warming, s config.Settings, reg prometheus.Registerer, log *logrus.Entry) {
	fleet := degrade.NewFleet(s.FleetSize)
	metrics.RegisterFleetSize(reg, fleet.Size)
	d := degrade.New(w, degrade.Config{ID: fleet.ID(), Share: fleet.Size, Observer: metrics.DegradeObserver(reg)})
	b.store = d
	log = log.WithFields(logrus.Fields{"replica": fleet.ID(), "fleet_size": s.FleetSize})
	b.run = func(ctx context.Context) error {
		go func() { _ = fleet.Beat(ctx, w, heartbeatInterval, log) }()
		return d.Run(ctx)
	}
}
