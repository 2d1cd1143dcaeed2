package metrics

import (
	"github.com/dynalimit/dynalimit/pkg/dynamo/usage"
	"github.com/prometheus/client_golang/prometheus"
)

// aggregatorObserver counts what the usage aggregator did.
type aggregatorObserver struct {
	records    [2]prometheus.Counter // applied, failed
	duplicates prometheus.Counter
	writes     prometheus.Counter
}

// AggregatorObserver returns the observer of the usage aggregator
// (pkg/dynamo/usage), registered on reg.
func AggregatorObserver(reg prometheus.Registerer) usage.Observer {
	records := register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ratelimit_aggregator_records_total",
		Help: "Stream records the usage aggregator processed, by outcome: applied (usage added, now or by an earlier delivery, or none to add), failed (left to be delivered again).",
	}, []string{"outcome"}))
	return &aggregatorObserver{
		records: [2]prometheus.Counter{records.WithLabelValues(usage.OutcomeApplied), records.WithLabelValues(usage.OutcomeFailed)},
		duplicates: register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ratelimit_aggregator_duplicates_total",
			Help: "Stream records delivered again after they were applied (a Lambda retry, a poller restart): skipped, not counted twice.",
		})),
		writes: register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ratelimit_aggregator_snapshot_writes_total",
			Help: "Usage snapshot updates written (one per snapshot item and transaction).",
		})),
	}
}

func (o *aggregatorObserver) Records(outcome string, n int) {
	if n <= 0 {
		return
	}
	if outcome == usage.OutcomeFailed {
		o.records[1].Add(float64(n))
		return
	}
	o.records[0].Add(float64(n))
}

func (o *aggregatorObserver) Duplicates(n int) { o.duplicates.Add(float64(max(n, 0))) }

func (o *aggregatorObserver) SnapshotWrites(n int) { o.writes.Add(float64(max(n, 0))) }
