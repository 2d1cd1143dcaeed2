package main

import (
	"context"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"

	"github.com/dynalimit/dynalimit/internal/config"
	"github.com/dynalimit/dynalimit/internal/memstore"
	"github.com/dynalimit/dynalimit/internal/metrics"
	"github.com/dynalimit/dynalimit/internal/service"
	"github.com/dynalimit/dynalimit/internal/tracing"
)

// backend is the store the service decides on, with its background work and
// its release.
type backend struct {
	store service.Store
	run   func(context.Context) error
	close func()
}

func openBackend(ctx context.Context, s config.Settings, m *metrics.Metrics, reg prometheus.Registerer, tp *tracing.Provider, log *logrus.Entry) (backend, error) {
	switch s.BackendType {
	case config.BackendMemory:
		st := memstore.New(
			memstore.WithNamespace(s.Namespace),
			memstore.WithMaxBuckets(s.MemoryMaxBuckets),
			memstore.WithMaxBytes(int64(s.MemoryMaxBytes)),
			memstore.WithSweepInterval(s.MemorySweepInterval),
		)
		m.RegisterStoreStats(func() metrics.StoreStats {
			stats := st.Stats()
			return metrics.StoreStats{Buckets: stats.Buckets, Bytes: stats.Bytes, EvictedFull: stats.EvictedFull, EvictedNotFull: stats.EvictedNotFull, ForgivenMillitokens: stats.ForgivenMillitokens}
		})
		log.WithFields(logrus.Fields{"max_buckets": s.MemoryMaxBuckets, "max_bytes": s.MemoryMaxBytes}).Info("embedded store")
		return backend{store: st, run: st.Run, close: func() {}}, nil
	case config.BackendDynamoDB:
		return openDynamo(ctx, s, reg, tp, log)
	}
	return backend{}, fmt.Errorf("BACKEND_TYPE %q: want memory or dynamodb", s.BackendType)
}

// svcJSON adapts the service's JSON endpoint to an http.Handler.
type svcJSON struct{ s *service.Service }

func (h svcJSON) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.s.ServeJSON(w, r) }
