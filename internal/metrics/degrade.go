package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dynalimit/dynalimit/internal/degrade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// degradeObserver counts what ON_UNAVAILABLE=local decided, repaid and
// lost.
type degradeObserver struct {
	local    [2]prometheus.Counter // allowed, refused
	degraded prometheus.Gauge
	tracked  prometheus.Gauge
	repaid   *prometheus.CounterVec
	lost     [2]prometheus.Counter // tokens, decisions
}

// DegradeObserver returns the observer of ON_UNAVAILABLE=local
// (internal/degrade), registered on reg.
func DegradeObserver(reg prometheus.Registerer) degrade.Observer {
	local := register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ratelimit_local_decisions_total",
		Help: "Decisions made on this replica's share of each limit because the shared store could not make them in time (ON_UNAVAILABLE=local), by decision: allowed, refused.",
	}, []string{"decision"}))
	lost := register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ratelimit_degraded_debt_lost_total",
		Help: "What was decided locally (ON_UNAVAILABLE=local) and will never be repaid to the shared store: still owed when the replica stopped, or a repayment dropped; by unit: tokens (charged or refunded), decisions (the local decisions it was owed for, once per bucket item).",
	}, []string{"unit"}))
	return &degradeObserver{
		lost:  [2]prometheus.Counter{lost.WithLabelValues("tokens"), lost.WithLabelValues("decisions")},
		local: [2]prometheus.Counter{local.WithLabelValues("allowed"), local.WithLabelValues("refused")},
		degraded: register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ratelimit_degraded_items",
			Help: "Bucket items decided locally until a write to them succeeds (ON_UNAVAILABLE=local).",
		})),
		tracked: register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ratelimit_local_items",
			Help: "Bucket items with a local bucket: degraded, owing what was admitted locally, or decided locally in the last 10 s.",
		})),
		repaid: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			// An older name, kept for the dashboards that query it.
			Name: "ratelimit_settle_ups_total",
			Help: "Repayments of what was decided locally, charged to the shared items, by result: applied, duplicate (an earlier try landed unanswered), failed (retried with the same stamp), dropped.",
		}, []string{"result"})),
	}
}

func (o *degradeObserver) Local(admitted bool) {
	if admitted {
		o.local[0].Inc()
	} else {
		o.local[1].Inc()
	}
}

func (o *degradeObserver) Items(degraded, tracked int) {
	o.degraded.Set(float64(degraded))
	o.tracked.Set(float64(tracked))
}

func (o *degradeObserver) Repaid(result string) { o.repaid.WithLabelValues(result).Inc() }

func (o *degradeObserver) Lost(tokens tokenbucket.Millitokens, decisions int) {
	o.lost[0].Add(float64(tokens) / 1000)
	o.lost[1].Add(float64(decisions))
}

// RegisterFleetSize exports the number of live replicas, N, by which
// ON_UNAVAILABLE=local bounds a replica's share (at least 1/(4N); 1/N
// before it has seen an item's demand).
func RegisterFleetSize(reg prometheus.Registerer, size func() int) {
	register(reg, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "ratelimit_fleet_size",
		Help: "Live replicas sharing the store (FLEET_SIZE, or counted by heartbeats): ON_UNAVAILABLE=local gives each its part of an item's recent demand, at least 1/(4N) of every limit, and 1/N until it has seen a second of it.",
	}, func() float64 { return float64(size()) }))
}
