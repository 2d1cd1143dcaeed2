package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
	"github.com/sirupsen/logrus"

	"github.com/dynalimit/dynalimit/internal/adjust"
	"github.com/dynalimit/dynalimit/internal/admin"
	"github.com/dynalimit/dynalimit/internal/config"
	"github.com/dynalimit/dynalimit/internal/degrade"
	"github.com/dynalimit/dynalimit/internal/metrics"
	"github.com/dynalimit/dynalimit/internal/redisclient"
	"github.com/dynalimit/dynalimit/internal/redisstore"
	"github.com/dynalimit/dynalimit/internal/service"
)

// redisStore is what the Redis backend decides, settles and repays on:
// one store, or two when REDIS_PERSECOND splits them.
type redisStore interface {
	service.Store
	adjust.Settler
	degrade.Shared
	degrade.Heart
	degrade.Seer
	admin.RedisStore
	Close() error
}

// redisBackend is the Redis store (BACKEND_TYPE=redis, or REDIS_URL set
// with BACKEND_TYPE unset): a fleet's buckets in the Redis its operators
// run. It starts before Redis answers: its warm-up connects (retrying as
// REDIS_STARTUP_* say), and a decision meanwhile waits BACKEND_TIMEOUT for
// the connection, then fails as Redis not answering (ON_UNAVAILABLE).
type redisBackend struct {
	st      redisStore
	stores  []*redisstore.Store // main, then per-second when split
	opts    redisclient.Options
	clients atomic.Pointer[redisclient.Clients]
	ops     admin.Stores
	// gate holds the namespaces the registry (on the main Redis) marks
	// deleted.
	gate registryWatch
	log  *logrus.Entry
	// active: health follows the clients' connections after the warm-up
	// (REDIS_HEALTH_CHECK_ACTIVE_CONNECTION).
	active bool
}

var (
	_ backend       = (*redisBackend)(nil)
	_ warmer        = (*redisBackend)(nil)
	_ sharedBackend = (*redisBackend)(nil)
)

// openRedis makes the Redis backend; it connects in Warmup.
func openRedis(o backendOptions) backend {
	s := o.settings
	cfg := redisstore.Config{Namespace: s.Namespace, Timeout: s.BackendTimeout, UsageRetention: s.UsageRetention, ConfigCacheTTL: s.ConfigCacheTTL, Observer: metrics.RedisObserver(o.reg)}
	opts := s.RedisOptions()
	b := &redisBackend{opts: opts, active: s.RedisHealthCheckActiveConnection}
	main := redisstore.Open(cfg)
	b.stores = []*redisstore.Store{main}
	b.st = main
	if opts.PerSecond != nil {
		ps := redisstore.Open(cfg)
		b.stores = append(b.stores, ps)
		b.st = redisstore.NewSplit(main, ps)
	}
	fields := logrus.Fields{"redis": opts.Main.String(), "namespace": s.Namespace}
	if opts.PerSecond != nil {
		fields["redis_persecond"] = opts.PerSecond.String()
	}
	b.log = o.log.WithFields(fields)
	msg := "Redis store"
	if s.BackendInferred {
		msg = "BACKEND_TYPE unset, REDIS_URL set: Redis"
	}
	b.log.Info(msg)
	b.ops = admin.Redis(b.st, s.Namespace, b.log.WithField("component", "admin"))
	reread := s.ConfigCacheTTL
	if reread <= 0 {
		reread = redisstore.DefaultConfigCacheTTL
	}
	b.gate = newRegistryWatch(s.Namespace, o.names, reread, b.log)
	if s.OnUnavailable == config.OnUnavailableLocal {
		return degraded(b, s, o.reg, o.late, b.log)
	}
	return b
}

// Warmup connects to Redis (and the per-second Redis), retrying until it
// answers or ctx ends, and loads the decision script on each. A setting
// that is wrong (an address, a TLS file) cannot mend and is returned.
func (b *redisBackend) Warmup(ctx context.Context) error {
	start := time.Now()
	o := b.opts
	o.OnRetry = func(target string, err error, wait time.Duration) {
		b.log.WithError(err).WithFields(logrus.Fields{"target": target, "retry_in": wait.Round(time.Millisecond).String()}).
			Warn("Redis does not answer yet; decisions meanwhile follow ON_UNAVAILABLE")
	}
	clients, err := redisclient.Open(ctx, o)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("redis store: %w", err)
	}
	b.clients.Store(clients)
	for i, c := range []rueidis.Client{clients.Main, clients.PerSecond}[:len(b.stores)] {
		if !b.attach(ctx, b.stores[i], c) {
			return nil
		}
	}
	b.log.WithField("took", time.Since(start).Round(time.Millisecond).String()).Info("Redis store ready")
	return nil
}

// attach gives st its client, retrying every second while the scripts do
// not load; false if ctx ends first.
func (b *redisBackend) attach(ctx context.Context, st *redisstore.Store, c rueidis.Client) bool {
	for {
		err := st.Attach(ctx, c)
		if err == nil {
			return true
		}
		b.log.WithError(err).Warn("loading the decision script failed; retrying")
		select {
		case <-ctx.Done():
			return false
		case <-time.After(time.Second):
		}
	}
}

// warmupCondition is what health awaits until Warmup returns.
func (b *redisBackend) warmupCondition() string { return "redis connection (REDIS_URL)" }

// watch makes health follow the clients' connections every second, with
// REDIS_HEALTH_CHECK_ACTIVE_CONNECTION: NOT_SERVING while a client holds
// no open connection to a node.
func (b *redisBackend) watch(ctx context.Context, ready func(ok bool)) error {
	if !b.active {
		return nil
	}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	was := true
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		c := b.clients.Load()
		ok := c != nil && c.Connected()
		if ok != was {
			b.log.WithField("connected", ok).Warn("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION: health follows the connection to Redis")
			ready(ok)
			was = ok
		}
	}
}

// Store is the store.
func (b *redisBackend) Store() service.Store { return b.st }

// Settler is the store.
func (b *redisBackend) Settler() adjust.Settler { return b.st }

// Hierarchy is the store's entity records: the stored ancestors a
// cascading rule's topmost entity charges.
func (b *redisBackend) Hierarchy() service.Hierarchy { return b.st }

// Gate is the namespaces the registry marks deleted, as Run last read
// them.
func (b *redisBackend) Gate() service.NamespaceGate { return b.gate.deleted }

// Run follows the namespace registry once the store is connected, until
// ctx ends (registryWatch.run).
func (b *redisBackend) Run(ctx context.Context) error {
	select {
	case <-b.stores[0].Attached():
	case <-ctx.Done():
		return nil
	}
	return b.gate.run(ctx, b.st.Namespaces())
}

// Close closes the stores, then the clients.
func (b *redisBackend) Close() error {
	err := b.st.Close()
	if c := b.clients.Load(); c != nil {
		c.Close()
	}
	return err
}

// Operator is the store as the operator's commands see it.
func (b *redisBackend) Operator() admin.Stores { return b.ops }

// shared is the store (degrade.Shared).
func (b *redisBackend) shared() degrade.Shared { return b.st }

// heart is the store once connected; nil if ctx ends first.
func (b *redisBackend) heart(ctx context.Context) degrade.Heart {
	select {
	case <-b.stores[0].Attached():
		return b.st
	case <-ctx.Done():
		return nil
	}
}
