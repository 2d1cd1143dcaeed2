package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"

	"github.com/dynalimit/dynalimit/internal/adjust"
	"github.com/dynalimit/dynalimit/internal/admin"
	"github.com/dynalimit/dynalimit/internal/config"
	"github.com/dynalimit/dynalimit/internal/memstore"
	"github.com/dynalimit/dynalimit/internal/metrics"
	"github.com/dynalimit/dynalimit/internal/service"
	"github.com/dynalimit/dynalimit/internal/tracing"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// backend is the store the service decides on, with its background work and
// its release.
type backend struct {
	store service.Store
	// hierarchy gives stored entity ancestors (DynamoDB); nil on the
	// embedded store, whose chains are the configuration's alone.
	hierarchy service.Hierarchy
	// settler applies lease settlements, once per lease (the store).
	settler adjust.Settler
	run     func(context.Context) error
	// warmup, when set, readies the store before the service reports ready
	// (health NOT_SERVING until it returns nil). It retries what may
	// recover, and returns an error only for what cannot (a table of
	// another schema): the service then stops.
	warmup func(context.Context) error
	close  func()
	// gate holds the namespaces the registry marks deleted (DynamoDB);
	// nil on the embedded store, which has no registry.
	gate service.NamespaceGate
	// watch keeps gate current for the namespaces names returns, until
	// ctx ends (DynamoDB).
	watch func(ctx context.Context, names func() []string) error
	// ops is the store as the operator's commands see it (the admin API).
	ops admin.Stores
}

// warmupCondition is what health awaits while a backend warms up.
const warmupCondition = "dynamodb warm-up (BACKEND_WARMUP_TIMEOUT)"

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
		return backend{store: st, settler: st, run: st.Run, close: func() {}, ops: admin.Embedded(st, s.Namespace, log.WithField("component", "admin"))}, nil
	case config.BackendDynamoDB:
		return openDynamo(ctx, s, reg, tp, log)
	}
	return backend{}, fmt.Errorf("BACKEND_TYPE %q: want memory or dynamodb", s.BackendType)
}

// svcJSON adapts the service's JSON endpoint to an http.Handler.
type svcJSON struct{ s *service.Service }

func (h svcJSON) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.s.ServeJSON(w, r) }

// warming is the DynamoDB store while it opens. A decision that arrives
// before the store is open waits for it, within wait (BACKEND_TIMEOUT), and
// is then the store's: a request in the first moments of a replica is
// decided, not answered by ON_UNAVAILABLE because this process had not yet
// opened its store. Only a decision whose wait ends with the store still
// unopened (DynamoDB has not answered its first calls within the budget)
// fails as DynamoDB not answering, as any call past its budget does.
type warming struct {
	p    atomic.Pointer[dynamo.Store]
	wait time.Duration

	mu     sync.Mutex
	opened chan struct{} // closed by set; made on first use
}

var errWarming = fmt.Errorf("dynamodb store not open yet (warming up): %w", dynamo.ErrUnavailable)

func (w *warming) openedCh() chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.opened == nil {
		w.opened = make(chan struct{})
	}
	return w.opened
}

// set makes st the store decisions go to; it is called once.
func (w *warming) set(st *dynamo.Store) {
	w.p.Store(st)
	close(w.openedCh())
}

func (w *warming) Acquire(ctx context.Context, plan *cascade.Plan) (cascade.Decision, error) {
	st := w.store(ctx)
	if st == nil {
		return cascade.Decision{}, errWarming
	}
	return st.Acquire(ctx, plan)
}

// Settle settles with the store once it is open (adjust.Settler).
func (w *warming) Settle(ctx context.Context, st *cascade.Settlement) (cascade.Settled, error) {
	s := w.store(ctx)
	if s == nil {
		return cascade.Settled{}, errWarming
	}
	return s.Settle(ctx, st)
}

// Ancestors returns the stored ancestors of key's entity from the store,
// once it is open (service.Hierarchy).
func (w *warming) Ancestors(ctx context.Context, key cascade.Key, max int) ([]cascade.Ancestor, error) {
	st := w.store(ctx)
	if st == nil {
		return nil, errWarming
	}
	return st.Ancestors(ctx, key, max)
}

// Heartbeat records this replica in the fleet record once the store is
// open (degrade.Heart).
func (w *warming) Heartbeat(ctx context.Context, id string, ttl time.Duration, stale []string) (int, []string, error) {
	st := w.p.Load()
	if st == nil {
		return 0, nil, errWarming
	}
	return st.Heartbeat(ctx, id, ttl, stale)
}

// LastSeen is what the open store last saw of d's bucket; nothing while it
// warms up (degrade.Seer).
func (w *warming) LastSeen(d *cascade.Debit) (tokenbucket.Millitokens, bool, bool) {
	st := w.p.Load()
	if st == nil {
		return 0, false, false
	}
	return st.LastSeen(d)
}

// store returns the open store, waiting for it within wait; nil if it is
// still not open.
func (w *warming) store(ctx context.Context) *dynamo.Store {
	st := w.p.Load()
	if st == nil && w.wait > 0 {
		t := time.NewTimer(w.wait)
		select {
		case <-w.openedCh():
			st = w.p.Load()
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
	return st
}

// cacheStats reports the open store's caches; none while it warms up.
func (w *warming) cacheStats() []dynamo.CacheStats {
	if st := w.p.Load(); st != nil {
		return st.CacheStats()
	}
	return nil
}

func (w *warming) close() {
	if st := w.p.Load(); st != nil {
		_ = st.Close()
	}
}

// warmDynamo opens the store (open checks the table's schema version) and
// warms it up (dynamo.Store.Warm), trying again after a failure, with a
// backoff of up to 5 s, until it succeeds or ctx ends (then it returns nil).
// The first failure is logged at once, with what to check (explain's
// message when it has one, else warmupHint's); while no attempt has
// succeeded, an error is logged every window. What waiting cannot mend is
// returned, explained: a missing table (dynamo.ErrNoTable) or a table of
// another schema (dynamo.ErrSchema).
func warmDynamo(ctx context.Context, w *warming, open func(context.Context) (*dynamo.Store, error), o dynamo.WarmOptions, window time.Duration, explain func(error) error, log *logrus.Entry) error {
	hint := func(err error) string {
		if e := explain(err); e != err { //nolint:errorlint // explain returns err itself when it has nothing to add
			return e.Error()
		}
		return warmupHint(err)
	}
	start := time.Now()
	log.WithField("timeout", window.String()).Info("dynamodb warm-up: health is NOT_SERVING until it is done")
	windowStart, warned := start, false
	for attempt := 0; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, window)
		rep, err := warmOnce(actx, w, open, o)
		cancel()
		if err == nil {
			f := logrus.Fields{"took": time.Since(start).Round(time.Millisecond).String(), "attempts": attempt + 1, "rounds": rep.Rounds, "slowest_call_ms": millis(rep.Slowest)}
			if rep.DescribeSkipped {
				log.Warn("dynamodb warm-up: DescribeTable is denied, so the table's key schema was not checked (its schema version was); grant dynamodb:DescribeTable to have it checked")
			}
			log.WithFields(f).Info("dynamodb store ready")
			return nil
		}
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, dynamo.ErrSchema) || errors.Is(err, dynamo.ErrNoTable) {
			return fmt.Errorf("dynamodb store: %w", explain(err))
		}
		if !warned {
			log.WithError(err).WithField("check", hint(err)).Warn("dynamodb warm-up failed; retrying, health stays NOT_SERVING")
			warned = true
		}
		if waited := time.Since(windowStart); waited >= window {
			log.WithError(err).WithFields(logrus.Fields{"check": hint(err), "waited": time.Since(start).Round(time.Second).String()}).
				Error("dynamodb warm-up has not succeeded within BACKEND_WARMUP_TIMEOUT; health stays NOT_SERVING and it keeps retrying")
			windowStart = time.Now()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(min(100*time.Millisecond<<min(attempt, 6), 5*time.Second)):
		}
	}
}

// warmOnce is one attempt: open the store unless an earlier attempt did,
// then warm it up.
func warmOnce(ctx context.Context, w *warming, open func(context.Context) (*dynamo.Store, error), o dynamo.WarmOptions) (dynamo.WarmReport, error) {
	st := w.p.Load()
	if st == nil {
		var err error
		if st, err = open(ctx); err != nil {
			return dynamo.WarmReport{}, err
		}
		w.set(st)
	}
	return st.Warm(ctx, o)
}

func millis(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = float64(d.Microseconds()) / 1000
	}
	return out
}

// warmupHint says what to check after a failed warm-up.
func warmupHint(err error) string {
	msg := err.Error()
	var nerr net.Error
	switch {
	case errors.Is(err, dynamo.ErrNoTable) || strings.Contains(msg, "ResourceNotFoundException"):
		return "the table does not exist: create it with `ratelimit table create` (or your infrastructure code); check DYNAMODB_TABLE and AWS_REGION"
	case strings.Contains(msg, "AccessDenied") || strings.Contains(msg, "UnrecognizedClient") || strings.Contains(msg, "InvalidSignature"):
		return "the credentials are refused or lack a permission: check the principal's IAM policy (the service needs dynamodb:GetItem, BatchGetItem, UpdateItem, PutItem, TransactWriteItems, Query and DescribeTable on the table)"
	case strings.Contains(msg, "credentials"):
		return "no AWS credentials were found: check the SDK's default chain (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE, IRSA's AWS_ROLE_ARN and AWS_WEB_IDENTITY_TOKEN_FILE, the instance or task role)"
	case errors.As(err, &nerr) || strings.Contains(msg, "connection refused") || strings.Contains(msg, "no such host") || strings.Contains(msg, "deadline exceeded"):
		return "DynamoDB did not answer: check DYNAMODB_ENDPOINT (is DynamoDB Local running there?) or, on AWS, AWS_REGION and the network path to DynamoDB"
	case errors.Is(err, dynamo.ErrThrottled):
		return "DynamoDB throttled the warm-up: check the table's capacity"
	}
	return "check DYNAMODB_ENDPOINT, AWS_REGION, DYNAMODB_TABLE and the credentials"
}
