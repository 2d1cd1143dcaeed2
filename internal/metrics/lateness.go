package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Causes of a DynamoDB call's timeout (the cause label of
// ratelimit_dynamodb_timeouts_total).
const (
	causeProcessLate = "process_late"
	causeStore       = "store"
)

// timeoutCause is why a call that ran out after took did: this process ran
// late for it (late, nil: never), or the store did not answer in time.
func timeoutCause(late func(time.Duration) bool, took time.Duration) string {
	if late != nil && late(took) {
		return causeProcessLate
	}
	return causeStore
}

// ProcessLateness returns what observes this process's lateness
// (lateness.Meter), as the histogram ratelimit_process_lateness_seconds
// registered on reg.
func ProcessLateness(reg prometheus.Registerer) func(late time.Duration) {
	h := register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "ratelimit_process_lateness_seconds",
		Help:    "How much later than asked a goroutine of this process that sleeps 10 ms in a loop wakes: the delay the Go scheduler and the machine add to everything the process does (tens of microseconds with CPU to spare; tens of milliseconds on a saturated CPU or a throttled CPU quota).",
		Buckets: []float64{.0001, .0005, .001, .002, .005, .01, .02, .05, .1, .25, 1},
	}))
	return func(late time.Duration) { h.Observe(late.Seconds()) }
}
