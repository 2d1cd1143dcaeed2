package metrics

import (
	"context"
	"errors"
	"reflect"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dynalimit/dynalimit/pkg/dynamo"
)

// DynamoDB call outcomes (the outcome label).
const (
	dynamoOK              = "ok"
	dynamoConditionFailed = "condition_failed"
	dynamoThrottled       = "throttled"
	dynamoTimeout         = "timeout"
	dynamoError           = "error"
)

// Levels of a batched write (the level label of
// ratelimit_dynamodb_batch_decisions).
const (
	batchOwn    = "own"
	batchParent = "parent"
)

// dynamoMetrics are the collectors of one instrumented DynamoDB client.
type dynamoMetrics struct {
	calls    *prometheus.CounterVec
	units    *prometheus.CounterVec
	duration *prometheus.HistogramVec
	timeouts *prometheus.CounterVec
	// late reports whether the process ran late for a call of a budget
	// (nil: never).
	late func(budget time.Duration) bool
}

func newDynamoMetrics(reg prometheus.Registerer) *dynamoMetrics {
	return &dynamoMetrics{
		calls: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimit_dynamodb_calls_total",
			Help: "DynamoDB calls by operation and outcome (ok, condition_failed, throttled, timeout, error).",
		}, []string{"operation", "outcome"})),
		units: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimit_dynamodb_consumed_capacity_units_total",
			Help: "Capacity units DynamoDB reported consumed (ReturnConsumedCapacity), by operation. Failed conditional writes report none but cost one write unit each (see calls_total).",
		}, []string{"operation"})),
		duration: register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ratelimit_dynamodb_call_duration_seconds",
			Help:    "Latency of DynamoDB calls, by operation.",
			Buckets: []float64{.0005, .001, .002, .003, .005, .0075, .01, .015, .02, .03, .05, .1, .25, 1},
		}, []string{"operation"})),
		timeouts: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimit_dynamodb_timeouts_total",
			Help: "DynamoDB calls that ran out of their budget (outcome timeout), by operation and cause: process_late when this process ran late by a quarter of the call's time or more (ratelimit_process_lateness_seconds: its own CPU, not DynamoDB), store otherwise.",
		}, []string{"operation", "cause"})),
	}
}

func (m *dynamoMetrics) observe(op string, start time.Time, err error, units float64) {
	took := time.Since(start)
	m.duration.WithLabelValues(op).Observe(took.Seconds())
	outcome := dynamoOutcome(err)
	m.calls.WithLabelValues(op, outcome).Inc()
	if outcome == dynamoTimeout {
		m.timeouts.WithLabelValues(op, timeoutCause(m.late, took)).Inc()
	}
	if units > 0 {
		m.units.WithLabelValues(op).Add(units)
	}
}

func dynamoOutcome(err error) string {
	if err == nil {
		return dynamoOK
	}
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return dynamoConditionFailed
	}
	var tce *types.TransactionCanceledException
	if errors.As(err, &tce) {
		for _, r := range tce.CancellationReasons {
			if aws.ToString(r.Code) == "ConditionalCheckFailed" {
				return dynamoConditionFailed
			}
		}
	}
	var pte *types.ProvisionedThroughputExceededException
	var rle *types.RequestLimitExceeded
	if errors.As(err, &pte) || errors.As(err, &rle) {
		return dynamoThrottled
	}
	var api smithy.APIError
	if errors.As(err, &api) && (api.ErrorCode() == "ThrottlingException" || api.ErrorCode() == "Throttling") {
		return dynamoThrottled
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return dynamoTimeout
	}
	return dynamoError
}

// DynamoDB returns a DynamoDB client option that counts every call of the
// client by operation and outcome, observes its latency, and adds up the
// capacity DynamoDB reports consumed (ReturnConsumedCapacity). It hangs one
// middleware at the front of the SDK's initialize step, so every operation
// of the client is observed, those the store does not call included, and a
// call's time covers all of it (validation, signing, the round trip). Pass
// it to dynamo.NewClient or dynamodb.NewFromConfig, or to one call.
// Collectors are registered with reg (nil: not registered); two options on
// one registry share them.
func DynamoDB(reg prometheus.Registerer) func(*dynamodb.Options) {
	return DynamoDBLate(reg, nil)
}

// DynamoDBLate is DynamoDB, with late telling whether this process ran
// late for a call of a budget (lateness.Meter.Late): a call that runs out
// of its time then counts as cause="process_late" in
// ratelimit_dynamodb_timeouts_total (nil: every timeout is the store's).
func DynamoDBLate(reg prometheus.Registerer, late func(budget time.Duration) bool) func(*dynamodb.Options) {
	m := newDynamoMetrics(reg)
	m.late = late
	mw := middleware.InitializeMiddlewareFunc("ratelimit.metrics", m.handle)
	return func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			return s.Initialize.Add(mw, middleware.Before)
		})
	}
}

// handle runs one call and observes it.
func (m *dynamoMetrics) handle(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
	start := time.Now()
	out, md, err := next.HandleInitialize(ctx, in)
	m.observe(middleware.GetOperationName(ctx), start, err, consumed(out.Result))
	return out, md, err
}

// consumed returns the capacity units an operation's output reports in its
// ConsumedCapacity field, one record or a list (0 for an output without
// one). The field is read by name, so that every operation that reports
// capacity is counted without a list of them here.
func consumed(result any) float64 {
	v := reflect.ValueOf(result)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return 0
	}
	f := v.Elem().FieldByName("ConsumedCapacity")
	if !f.IsValid() {
		return 0
	}
	switch cc := f.Interface().(type) {
	case *types.ConsumedCapacity:
		if cc != nil {
			return aws.ToFloat64(cc.CapacityUnits)
		}
	case []types.ConsumedCapacity:
		var n float64
		for i := range cc {
			n += aws.ToFloat64(cc[i].CapacityUnits)
		}
		return n
	}
	return 0
}

// DynamoObserver counts the DynamoDB store's own events: shard doublings
// and merges,
// decisions answered from the rejection cache, decisions refused because
// their own bucket was too busy, and how many decisions each conditional
// write carried, and how the give-backs of refused plans ended; and it
// shows how far this replica's clock is behind other replicas' and how many
// give-backs are pending. Pass it to dynamo.WithObserver.
func DynamoObserver(reg prometheus.Registerer) dynamo.Observer {
	return &dynamoObserver{
		doublings: register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ratelimit_dynamodb_shard_doublings_total",
			Help: "Times the DynamoDB store doubled a hot bucket's shard count (DynamoDB throttled it, or its write rate neared one item's ceiling).",
		})),
		merges: register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ratelimit_dynamodb_shard_merges_total",
			Help: "Times the DynamoDB store halved an idle bucket's shard count, moving the removed shards' tokens into the others.",
		})),
		hits: register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ratelimit_dynamodb_rejection_cache_hits_total",
			Help: "Decisions refused from the local rejection cache without a DynamoDB call.",
		})),
		contended: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimit_dynamodb_contended_total",
			Help: "Decisions refused because their own bucket was too busy to decide them within BACKEND_TIMEOUT (contention, never ON_UNAVAILABLE), by reason: queued, raced, throttled, read, unreadable (an item this schema cannot read).",
		}, []string{"reason"})),
		batch: register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ratelimit_dynamodb_batch_decisions",
			Help:    "Decisions carried by one conditional bucket write (decisions on one item that queued while the write before was in flight), by level: own (the item is the own bucket of at least one of them), parent (an ancestor's bucket only, charged by cascading debits).",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128},
		}, []string{"level"})),
		behind: register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ratelimit_dynamodb_clock_skew_seconds",
			Help: "How far this replica's clock is behind the clock of another replica writing the same buckets, at least: the largest offset seen over the last minute between the writer's clock each bucket item records and this replica's clock when the item arrived (0 when this replica is ahead or in step). A fleet whose clocks are this far apart can admit up to this × a limit's rate more than the limit each time its bucket is full.",
		})),
		givebacks: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimit_dynamodb_givebacks_total",
			Help: "Give-backs of the tokens that parts of a refused multi-item request consumed (one per bucket item), by result: applied (within the decision's budget), applied_retry (retried in the background), dropped_age, dropped_bound, dropped_closed (tokens stay consumed), moot (table gone or item unreadable), unknown (the write went unanswered: never written again).",
		}, []string{"result"})),
		pending: register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ratelimit_dynamodb_givebacks_pending",
			Help: "Give-backs of refused requests that DynamoDB did not take yet, retried in the background (their tokens stay consumed meanwhile).",
		})),
	}
}

type dynamoObserver struct {
	doublings, hits prometheus.Counter
	merges          prometheus.Counter
	contended       *prometheus.CounterVec
	batch           *prometheus.HistogramVec
	behind          prometheus.Gauge
	givebacks       *prometheus.CounterVec
	pending         prometheus.Gauge
}

func (o *dynamoObserver) ShardDoubled()      { o.doublings.Inc() }
func (o *dynamoObserver) ShardMerged()       { o.merges.Inc() }
func (o *dynamoObserver) RejectionCacheHit() { o.hits.Inc() }
func (o *dynamoObserver) Contended(reason string) {
	o.contended.WithLabelValues(reason).Inc()
}
func (o *dynamoObserver) Batched(n, depth int) {
	level := batchOwn
	if depth > 0 {
		level = batchParent
	}
	o.batch.WithLabelValues(level).Observe(float64(n))
}
func (o *dynamoObserver) ClockBehind(d time.Duration) {
	o.behind.Set(d.Seconds())
}
func (o *dynamoObserver) GaveBack(result string) {
	o.givebacks.WithLabelValues(result).Inc()
}
func (o *dynamoObserver) GiveBacksPending(n int) { o.pending.Set(float64(n)) }

var (
	dynamoCacheEntriesDesc = prometheus.NewDesc("ratelimit_dynamodb_cache_entries",
		"Entries held by each local cache of the DynamoDB store (image, config, shard, entity, rejection).", []string{"cache"}, nil)
	dynamoCacheMaxDesc = prometheus.NewDesc("ratelimit_dynamodb_cache_max_entries",
		"Most entries each local cache of the DynamoDB store holds (0: disabled).", []string{"cache"}, nil)
	dynamoCacheLookupsDesc = prometheus.NewDesc("ratelimit_dynamodb_cache_lookups_total",
		"Lookups in each local cache of the DynamoDB store, by result (hit, miss).", []string{"cache", "result"}, nil)
	dynamoCacheEvictionsDesc = prometheus.NewDesc("ratelimit_dynamodb_cache_evictions_total",
		"Entries each local cache of the DynamoDB store dropped, least recently used first, to make room.", []string{"cache"}, nil)
)

// RegisterDynamoCaches registers with reg the sizes, hits, misses and
// evictions of the DynamoDB store's local caches, read from stats (a
// dynamo.Store's CacheStats) once per scrape: nothing is counted per
// decision. The cache label takes the few values of dynamo.CacheStats.Name.
func RegisterDynamoCaches(reg prometheus.Registerer, stats func() []dynamo.CacheStats) {
	register(reg, dynamoCaches(stats))
}

type dynamoCaches func() []dynamo.CacheStats

func (c dynamoCaches) Describe(ch chan<- *prometheus.Desc) {
	ch <- dynamoCacheEntriesDesc
	ch <- dynamoCacheMaxDesc
	ch <- dynamoCacheLookupsDesc
	ch <- dynamoCacheEvictionsDesc
}

func (c dynamoCaches) Collect(ch chan<- prometheus.Metric) {
	for _, st := range c() {
		ch <- prometheus.MustNewConstMetric(dynamoCacheEntriesDesc, prometheus.GaugeValue, float64(st.Entries), st.Name)
		ch <- prometheus.MustNewConstMetric(dynamoCacheMaxDesc, prometheus.GaugeValue, float64(st.Capacity), st.Name)
		ch <- prometheus.MustNewConstMetric(dynamoCacheLookupsDesc, prometheus.CounterValue, float64(st.Hits), st.Name, "hit")
		ch <- prometheus.MustNewConstMetric(dynamoCacheLookupsDesc, prometheus.CounterValue, float64(st.Misses), st.Name, "miss")
		ch <- prometheus.MustNewConstMetric(dynamoCacheEvictionsDesc, prometheus.CounterValue, float64(st.Evictions), st.Name)
	}
}
