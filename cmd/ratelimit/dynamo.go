package main

import (
	"context"
	"fmt"
	"io"

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
	client, err := dynamo.NewClient(ctx, s.DynamoDBEndpoint, s.AWSRegion)
	if err != nil {
		return backend{}, fmt.Errorf("dynamodb client: %w", err)
	}
	api := tracing.DynamoDB(metrics.InstrumentDynamo(client, reg), tp)
	cfg := dynamo.Config{
		Table:              s.DynamoDBTable,
		Namespace:          s.Namespace,
		Timeout:            s.BackendTimeout,
		ConfigCacheTTL:     s.ConfigCacheTTL,
		RejectionCacheSize: s.RejectionCacheSize,
	}
	open := func(ctx context.Context) (*dynamo.Store, error) {
		return dynamo.NewStore(ctx, api, cfg, dynamo.WithLogger(log), dynamo.WithObserver(metrics.DynamoObserver(reg)), dynamo.WithCallContext(tracing.CallContext))
	}
	w := &warming{}
	log = log.WithFields(logrus.Fields{"table": s.DynamoDBTable, "namespace": s.Namespace, "endpoint": s.DynamoDBEndpoint, "region": s.AWSRegion})
	return backend{
		store: w,
		warmup: func(ctx context.Context) error {
			return warmDynamo(ctx, w, open, dynamo.WarmOptions{Credentials: client.Options().Credentials}, s.BackendWarmupTimeout, log)
		},
		close: w.close,
	}, nil
}

// adminCommand runs a DynamoDB administration command.
func adminCommand(ctx context.Context, cmd string, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if err := admin.Run(ctx, append([]string{cmd}, args...), getenv, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "ratelimit %s: %v\n", cmd, err)
		return 1
	}
	return 0
}
