package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	tu "github.com/dynalimit/dynalimit/internal/testutil"
	"github.com/dynalimit/dynalimit/pkg/dynamo/usage"
)

func TestAggregatorObserver(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	o := AggregatorObserver(reg)
	o.Records(usage.OutcomeApplied, 7)
	o.Records(usage.OutcomeFailed, 2)
	o.Records(usage.OutcomeApplied, 0)
	o.Duplicates(3)
	o.SnapshotWrites(12)
	o.SnapshotWrites(-1)             // never decreases a counter
	again := AggregatorObserver(reg) // a second observer on the registry shares the collectors
	again.Duplicates(1)
	tests := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"ratelimit_aggregator_records_total", map[string]string{"outcome": "applied"}, 7},
		{"ratelimit_aggregator_records_total", map[string]string{"outcome": "failed"}, 2},
		{"ratelimit_aggregator_duplicates_total", nil, 4},
		{"ratelimit_aggregator_snapshot_writes_total", nil, 12},
	}
	for _, tt := range tests {
		if got := tu.CounterValue(t, reg, tt.name, tt.labels); got != tt.want {
			t.Errorf("%s%v = %v, want %v", tt.name, tt.labels, got, tt.want)
		}
	}
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 4 {
		t.Errorf("GatherAndCount() = %d, %v, want 4 series", n, err)
	}
}
