package metrics

import "github.com/prometheus/client_golang/prometheus"

// RLQS counts what the Rate Limit Quota Service does (internal/rlqs's
// Observer). Build it with NewRLQS.
type RLQS struct {
	streams      prometheus.Gauge
	buckets      prometheus.Gauge
	pushed       *prometheus.CounterVec
	share        prometheus.Histogram
	overAdmitted prometheus.Counter
	errors       *prometheus.CounterVec
	chargeFailed prometheus.Counter
}

// NewRLQS returns the RLQS metrics, registered on reg:
// ratelimit_rlqs_streams, ratelimit_rlqs_buckets,
// ratelimit_rlqs_assignments_total{kind}, ratelimit_rlqs_share,
// ratelimit_rlqs_over_admitted_total, ratelimit_rlqs_stream_errors_total{reason}
// and ratelimit_rlqs_charge_failures_total.
func NewRLQS(reg prometheus.Registerer) *RLQS {
	return &RLQS{
		streams: register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ratelimit_rlqs_streams",
			Help: "RLQS streams open.",
		})),
		buckets: register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ratelimit_rlqs_buckets",
			Help: "Buckets the open RLQS streams watch.",
		})),
		pushed: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimit_rlqs_assignments_total",
			Help: "Bucket actions sent on RLQS streams, answered or pushed, by kind: token_bucket, allow_all, deny_all, abandon.",
		}, []string{"kind"})),
		share: register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ratelimit_rlqs_share",
			Help:    "Each token-bucket assignment's share of its bucket's limit (its stream's demand over the fleet's).",
			Buckets: []float64{0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1},
		})),
		overAdmitted: register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ratelimit_rlqs_over_admitted_total",
			Help: "Requests Envoys reported admitted past what the limit held (the charge went into debt): an estimate of over-admission.",
		})),
		errors: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimit_rlqs_stream_errors_total",
			Help: "RLQS streams ended for a malformed or oversized report, by reason.",
		}, []string{"reason"})),
		chargeFailed: register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ratelimit_rlqs_charge_failures_total",
			Help: "RLQS store calls for a bucket (a slot's write, or a read) that failed; a write's allowed requests are charged with the next.",
		})),
	}
}

// Streams moves ratelimit_rlqs_streams by delta.
func (m *RLQS) Streams(delta int) { m.streams.Add(float64(delta)) }

// Buckets moves ratelimit_rlqs_buckets by delta.
func (m *RLQS) Buckets(delta int) { m.buckets.Add(float64(delta)) }

// Pushed counts one bucket action of kind.
func (m *RLQS) Pushed(kind string) { m.pushed.WithLabelValues(kind).Inc() }

// Share observes one assignment's share.
func (m *RLQS) Share(fraction float64) { m.share.Observe(fraction) }

// OverAdmitted adds requests admitted past the limit.
func (m *RLQS) OverAdmitted(requests float64) {
	if requests > 0 {
		m.overAdmitted.Add(requests)
	}
}

// StreamError counts a stream ended for reason.
func (m *RLQS) StreamError(reason string) { m.errors.WithLabelValues(reason).Inc() }

// ChargeFailed counts a store call for a bucket that failed.
func (m *RLQS) ChargeFailed() { m.chargeFailed.Inc() }
