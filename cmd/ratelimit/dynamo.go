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

// openDynamo connects to the table and returns the DynamoDB store.
func openDynamo(ctx context.Context, s config.Settings, reg prometheus.Registerer, tp *tracing.Provider, log *logrus.Entry) (backend, error) {
	client, err := dynamo.NewClient(ctx, s.DynamoDBEndpoint, s.AWSRegion)
	if err != nil {
		return backend{}, fmt.Errorf("dynamodb client: %w", err)
	}
	st, err := dynamo.NewStore(ctx, tracing.DynamoDB(metrics.InstrumentDynamo(client, reg), tp), s.DynamoConfig(),
		dynamo.WithLogger(log), dynamo.WithObserver(metrics.DynamoObserver(reg)), dynamo.WithCallContext(tracing.CallContext))
	if err != nil {
		return backend{}, fmt.Errorf("dynamodb store: %w", admin.Explain(err, s))
	}
	metrics.RegisterDynamoCaches(reg, st.CacheStats)
	log.WithFields(logrus.Fields{"table": s.DynamoDBTable, "namespace": s.Namespace, "endpoint": s.DynamoDBEndpoint}).Info("dynamodb store")
	return backend{store: st, close: func() { _ = st.Close() }}, nil
}
