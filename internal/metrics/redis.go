package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dynalimit/dynalimit/internal/redisstore"
)

// redisObserver counts the Redis store's calls of its decision script.
type redisObserver struct {
	calls    *prometheus.CounterVec
	duration prometheus.Histogram
	batch    prometheus.Histogram
}

// RedisObserver returns the Redis store's observer, its metrics registered
// on reg: ratelimit_redis_calls_total{outcome}, ratelimit_redis_call_duration_seconds
// and ratelimit_redis_batch_decisions.
func RedisObserver(reg prometheus.Registerer) redisstore.Observer {
	return &redisObserver{
		calls: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimit_redis_calls_total",
			Help: "Calls of the Redis store's decision script, by outcome: ok, timeout (no answer within BACKEND_TIMEOUT), error (Redis refused it, or the connection failed), busy (no free slot among the calls in flight within BACKEND_TIMEOUT).",
		}, []string{"outcome"})),
		duration: register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ratelimit_redis_call_duration_seconds",
			Help:    "Latency of each call of the Redis store's decision script, the wait for a slot included.",
			Buckets: []float64{0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1},
		})),
		batch: register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ratelimit_redis_batch_decisions",
			Help:    "Decisions (and settlements and repayments) carried by one call of the Redis store's decision script: those that queued on one key while the call before was in flight.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64},
		})),
	}
}

func (o *redisObserver) Call(outcome string, plans int, took time.Duration) {
	o.calls.WithLabelValues(outcome).Inc()
	o.duration.Observe(took.Seconds())
	o.batch.Observe(float64(plans))
}
