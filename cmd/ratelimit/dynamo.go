package main

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"

	"github.com/dynalimit/dynalimit/internal/admin"
	"github.com/dynalimit/dynalimit/internal/config"
	"github.com/dynalimit/dynalimit/internal/metrics"
	"github.com/dynalimit/dynalimit/internal/tracing"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
)

// openDynamo returns the DynamoDB store at once; its warmup opens the table
// and warms it up (see warmDynamo), and decisions before then are answered
// as DynamoDB not answering.
func openDynamo(ctx context.Context, s config.Settings, reg prometheus.Registerer, tp *tracing.Provider, log *logrus.Entry) (backend, error) {
	client, err := dynamo.NewClient(ctx, s.DynamoDBEndpoint, s.AWSRegion, metrics.DynamoDB(reg), tracing.DynamoDB(tp))
	if err != nil {
		return backend{}, fmt.Errorf("dynamodb client: %w", err)
	}
	open := func(ctx context.Context) (*dynamo.Store, error) {
		return dynamo.NewStore(ctx, client, s.DynamoConfig(), dynamo.WithLogger(log), dynamo.WithObserver(metrics.DynamoObserver(reg)), dynamo.WithCallContext(tracing.CallContext))
	}
	w := &warming{wait: s.BackendTimeout}
	metrics.RegisterDynamoCaches(reg, w.cacheStats)
	log = log.WithFields(logrus.Fields{"table": s.DynamoDBTable, "namespace": s.Namespace, "endpoint": s.DynamoDBEndpoint, "region": s.AWSRegion})
	return backend{
		store:     w,
		hierarchy: w,
		settler:   w,
		warmup: func(ctx context.Context) error {
			return warmDynamo(ctx, w, open, dynamo.WarmOptions{Credentials: client.Options().Credentials}, s.BackendWarmupTimeout, func(err error) error { return admin.Explain(err, s) }, log)
		},
		close: w.close,
	}, nil
}
