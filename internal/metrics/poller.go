package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// pollerObserver is the stream poller's progress as metrics.
type pollerObserver struct {
	read    prometheus.Counter
	age     prometheus.Gauge
	lag     prometheus.Gauge
	leading prometheus.Gauge
}

// PollerObserver returns the observer of the stream poller
// (internal/streampoll), registered on reg.
func PollerObserver(reg prometheus.Registerer) interface {
	Read(records int, age time.Duration)
	Checkpointed(lag time.Duration)
	Leading(held bool)
} {
	return &pollerObserver{
		read: register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ratelimit_aggregator_stream_records_read_total",
			Help: "Stream records the poller read (GetRecords).",
		})),
		age: register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ratelimit_aggregator_iterator_age_seconds",
			Help: "Age of the newest record of the poller's last read that returned any: how far behind the stream it reads.",
		})),
		lag: register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ratelimit_aggregator_checkpoint_lag_seconds",
			Help: "Age of the record the poller last checkpointed when it did: how far behind the stream the applied usage is.",
		})),
		leading: register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ratelimit_aggregator_lease_held",
			Help: "1 while this poller holds the table's stream lease (reads the stream), 0 while another does.",
		})),
	}
}

func (o *pollerObserver) Read(records int, age time.Duration) {
	o.read.Add(float64(records))
	if records > 0 {
		o.age.Set(age.Seconds())
	}
}

func (o *pollerObserver) Checkpointed(lag time.Duration) { o.lag.Set(lag.Seconds()) }

func (o *pollerObserver) Leading(held bool) {
	v := 0.0
	if held {
		v = 1
	}
	o.leading.Set(v)
}
