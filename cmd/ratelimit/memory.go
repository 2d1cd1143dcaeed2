package main

import (
	"context"

	"github.com/sirupsen/logrus"

	"github.com/dynalimit/dynalimit/internal/adjust"
	"github.com/dynalimit/dynalimit/internal/admin"
	"github.com/dynalimit/dynalimit/internal/memstore"
	"github.com/dynalimit/dynalimit/internal/metrics"
	"github.com/dynalimit/dynalimit/internal/service"
)

// memoryBackend is the embedded store (BACKEND_TYPE=memory): this process
// decides alone, and the chains are the configuration's. Its one background
// work is the store's sweep.
type memoryBackend struct {
	st  *memstore.Store
	ops admin.Stores
}

var _ backend = (*memoryBackend)(nil)

// openMemory makes the embedded store MEMORY_MAX_BUCKETS and
// MEMORY_MAX_BYTES bound, and reports its size in metrics.
func openMemory(o backendOptions) *memoryBackend {
	s := o.settings
	st := memstore.New(
		memstore.WithNamespace(s.Namespace),
		memstore.WithMaxBuckets(s.MemoryMaxBuckets),
		memstore.WithMaxBytes(int64(s.MemoryMaxBytes)),
		memstore.WithSweepInterval(s.MemorySweepInterval),
	)
	o.metrics.RegisterStoreStats(func() metrics.StoreStats {
		stats := st.Stats()
		return metrics.StoreStats{Buckets: stats.Buckets, Bytes: stats.Bytes, EvictedFull: stats.EvictedFull, EvictedNotFull: stats.EvictedNotFull, ForgivenMillitokens: stats.ForgivenMillitokens}
	})
	o.log.WithFields(logrus.Fields{"max_buckets": s.MemoryMaxBuckets, "max_bytes": s.MemoryMaxBytes}).Info("embedded store")
	return &memoryBackend{st: st, ops: admin.Embedded(st, s.Namespace, o.log.WithField("component", "admin"))}
}

// Store is the embedded store.
func (b *memoryBackend) Store() service.Store { return b.st }

// Settler is the embedded store.
func (b *memoryBackend) Settler() adjust.Settler { return b.st }

// Hierarchy is nil: the embedded store keeps no entities.
func (b *memoryBackend) Hierarchy() service.Hierarchy { return nil }

// Gate is nil: the embedded store has no namespace registry.
func (b *memoryBackend) Gate() service.NamespaceGate { return nil }

// Run sweeps the store until ctx ends.
func (b *memoryBackend) Run(ctx context.Context) error { return b.st.Run(ctx) }

// Close does nothing: the store holds nothing outside the process.
func (b *memoryBackend) Close() error { return nil }

// Operator is the embedded store's buckets: the admin API shows, resets
// and tops them up.
func (b *memoryBackend) Operator() admin.Stores { return b.ops }
