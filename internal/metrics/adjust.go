package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// The paths a settlement after the response arrives by (the path label).
const (
	// PathAccessLog: an entry of Envoy's access-log stream.
	PathAccessLog = "access_log"
	// PathStreamEnd: a ShouldRateLimit call at the end of a stream that
	// carries a lease.
	PathStreamEnd = "stream_end"
)

// The results of a settlement (the result label of
// ratelimit_adjustments_total).
const (
	// AdjustApplied: the store applied the settlement.
	AdjustApplied = "applied"
	// AdjustDuplicate: the lease was settled before (by the other path, or
	// an entry seen twice); nothing changed.
	AdjustDuplicate = "duplicate"
	// AdjustFailed: the store did not answer within the settlement's
	// budget and its retries (it may or may not have landed; a later
	// delivery of the same lease settles it at most once).
	AdjustFailed = "failed"
)

// adjustMetrics are the collectors of settlements after the response.
type adjustMetrics struct {
	results  *prometheus.CounterVec // path, result
	tokens   [2]prometheus.Counter  // charged, refunded
	micros   [2]prometheus.Counter  // charged, refunded: limits in dollars
	rejected *prometheus.CounterVec // path, reason
	ignored  *prometheus.CounterVec // reason
	entries  prometheus.Counter
	streams  prometheus.Gauge
}

func newAdjustMetrics(reg prometheus.Registerer) adjustMetrics {
	var a adjustMetrics
	a.results = register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ratelimit_adjustments_total",
		Help: "Settlements of a lease after the response, by path (access_log, stream_end) and result (applied, duplicate, failed).",
	}, []string{"path", "result"}))
	a.tokens = directions(reg, "ratelimit_adjustment_tokens_total",
		"Tokens that settlements moved on limits not in dollars, by direction: charged (the request cost more than its estimate) or refunded (less).")
	a.micros = directions(reg, "ratelimit_adjustment_microdollars_total",
		"Micro-dollars that settlements moved on limits in dollars, by direction: charged (the request cost more than its estimate) or refunded (less).")
	a.rejected = register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ratelimit_lease_verification_failures_total",
		Help: "Leases that did not verify, by path and reason (malformed, bad_signature, unknown_key, expired); nothing was settled.",
	}, []string{"path", "reason"}))
	a.ignored = register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ratelimit_access_log_entries_ignored_total",
		Help: "Access-log entries that settled nothing, by reason (no_lease, a verification failure's reason, no_cost: the estimate stands, bad_cost, not_http).",
	}, []string{"reason"}))
	a.entries = register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ratelimit_access_log_entries_total",
		Help: "Access-log entries received.",
	}))
	a.streams = register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "ratelimit_access_log_streams",
		Help: "Access-log streams open.",
	}))
	return a
}

// directions registers a counter by direction and returns its charged and
// refunded children.
func directions(reg prometheus.Registerer, name, help string) [2]prometheus.Counter {
	v := register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"direction"}))
	return [2]prometheus.Counter{v.WithLabelValues("charged"), v.WithLabelValues("refunded")}
}

// Adjusted records a settlement by path with its result; charged and
// refunded are the millitokens it moved on limits not in dollars (zero
// unless applied).
func (m *Metrics) Adjusted(path, result string, charged, refunded int64) {
	if m == nil {
		return
	}
	m.adjust.results.WithLabelValues(path, result).Inc()
	if charged > 0 {
		m.adjust.tokens[0].Add(float64(charged) / 1000)
	}
	if refunded > 0 {
		m.adjust.tokens[1].Add(float64(refunded) / 1000)
	}
}

// AdjustedMoney records what an applied settlement moved on limits in
// dollars: charged and refunded in nano-dollars (a money limit's
// millitokens), counted in micro-dollars. Adjusted counts the others.
func (m *Metrics) AdjustedMoney(charged, refunded int64) {
	if m == nil {
		return
	}
	if charged > 0 {
		m.adjust.micros[0].Add(float64(charged) / 1000)
	}
	if refunded > 0 {
		m.adjust.micros[1].Add(float64(refunded) / 1000)
	}
}

// LeaseRejected records a lease that did not verify; reason is one of a
// fixed set (lease.Reason), never request text.
func (m *Metrics) LeaseRejected(path, reason string) {
	if m == nil {
		return
	}
	m.adjust.rejected.WithLabelValues(path, reason).Inc()
}

// EntryIgnored records an access-log entry that settled nothing; reason is
// one of the sink's fixed set.
func (m *Metrics) EntryIgnored(reason string) {
	if m == nil {
		return
	}
	m.adjust.ignored.WithLabelValues(reason).Inc()
}

// AccessLogEntries records n access-log entries received.
func (m *Metrics) AccessLogEntries(n int) {
	if m == nil {
		return
	}
	m.adjust.entries.Add(float64(n))
}

// AccessLogStream records an access-log stream opening (+1) or closing (−1).
func (m *Metrics) AccessLogStream(delta int) {
	if m == nil {
		return
	}
	m.adjust.streams.Add(float64(delta))
}
