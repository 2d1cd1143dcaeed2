package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestNewRegistersEveryCollector(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := New(reg)
	m.ObserveDecision("api", false, 100*time.Microsecond)
	m.ObserveRule("api.user", RuleHits{Total: 1, WithinLimit: 1})
	m.ObserveStore(StoreError, time.Millisecond)
	m.OnUnavailable(true)
	m.InvalidRequest("empty_domain")
	m.ObserveReload(true, time.Unix(1700000000, 0))
	m.RegisterStoreStats(func() StoreStats { return StoreStats{Buckets: 3, Bytes: 4096} })

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather() error = %v", err)
	}
	got := map[string]bool{}
	for _, mf := range mfs {
		got[mf.GetName()] = true
		if !strings.HasPrefix(mf.GetName(), "ratelimit_") {
			t.Errorf("metric %q lacks the ratelimit_ prefix", mf.GetName())
		}
	}
	for _, name := range []string{
		"ratelimit_decisions_total",
		"ratelimit_decision_duration_seconds",
		"ratelimit_rule_hits_total",
		"ratelimit_rule_over_limit_hits_total",
		"ratelimit_rule_near_limit_hits_total",
		"ratelimit_rule_within_limit_hits_total",
		"ratelimit_rule_shadow_mode_hits_total",
		"ratelimit_store_duration_seconds",
		"ratelimit_store_errors_total",
		"ratelimit_on_unavailable_total",
		"ratelimit_invalid_requests_total",
		"ratelimit_config_last_reload_successful",
		"ratelimit_config_last_reload_success_timestamp_seconds",
		"ratelimit_config_reloads_total",
		"ratelimit_store_buckets",
		"ratelimit_store_memory_bytes",
		"ratelimit_store_evictions_total",
		"ratelimit_store_evicted_deficit_millitokens_total",
	} {
		if !got[name] {
			t.Errorf("Gather() lacks %s", name)
		}
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("GatherAndLint() = %v, %v, want no problems", problems, err)
	}
}

func TestCounters(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg)
	m.ObserveDecision("api", false, time.Microsecond)
	m.ObserveDecision("api", true, time.Microsecond)
	m.ObserveDecision("api", true, time.Microsecond)
	m.ObserveRule("api.user", RuleHits{Total: 5, OverLimit: 2, NearLimit: 1, WithinLimit: 3})
	m.ObserveRule("api.user", RuleHits{Total: 1, ShadowMode: 1, OverLimit: 1})
	m.ObserveStore(StoreAdmitted, time.Microsecond)
	m.ObserveStore(StoreError, time.Microsecond)
	m.ObserveStore(StoreError, time.Microsecond)
	m.ObserveStore(StoreOutcome(99), time.Microsecond) // ignored
	m.OnUnavailable(false)
	m.OnUnavailable(true)
	m.OnUnavailable(true)
	m.InvalidRequest("empty_domain")

	tests := []struct {
		name string
		c    prometheus.Collector
		want float64
	}{
		{"decisions OK", m.decisions.WithLabelValues("api", CodeOK), 1},
		{"decisions OVER_LIMIT", m.decisions.WithLabelValues("api", CodeOverLimit), 2},
		{"rule total", m.ruleTotal.WithLabelValues("api.user"), 6},
		{"rule over", m.ruleOver.WithLabelValues("api.user"), 3},
		{"rule near", m.ruleNear.WithLabelValues("api.user"), 1},
		{"rule within", m.ruleWithin.WithLabelValues("api.user"), 3},
		{"rule shadow", m.ruleShadow.WithLabelValues("api.user"), 1},
		{"store errors", m.storeErrors, 2},
		{"unavailable allowed", m.unavailable[0], 1},
		{"unavailable blocked", m.unavailable[1], 2},
		{"invalid", m.invalid.WithLabelValues("empty_domain"), 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := testutil.ToFloat64(tt.c); got != tt.want {
				t.Errorf("ToFloat64() = %v, want %v", got, tt.want)
			}
		})
	}
	if n := testutil.CollectAndCount(m.decisionLatency); n != 1 {
		t.Errorf("decision latency series = %d, want 1", n)
	}
}

func TestObserveReload(t *testing.T) {
	m := New(prometheus.NewRegistry())
	at := time.Unix(1700000000, 500_000_000)
	steps := []struct {
		ok                     bool
		wantOK, wantTS         float64
		wantSuccess, wantFails float64
	}{
		{true, 1, 1700000000.5, 1, 0},
		{false, 0, 1700000000.5, 1, 1},
		{true, 1, 1700000000.5, 2, 1},
	}
	for i, s := range steps {
		m.ObserveReload(s.ok, at)
		if got := testutil.ToFloat64(m.reloadOK); got != s.wantOK {
			t.Errorf("step %d: last_reload_successful = %v, want %v", i, got, s.wantOK)
		}
		if got := testutil.ToFloat64(m.reloadLastOK); got != s.wantTS {
			t.Errorf("step %d: last success timestamp = %v, want %v", i, got, s.wantTS)
		}
		if got := testutil.ToFloat64(m.reloads[1]); got != s.wantSuccess {
			t.Errorf("step %d: reloads{success} = %v, want %v", i, got, s.wantSuccess)
		}
		if got := testutil.ToFloat64(m.reloads[0]); got != s.wantFails {
			t.Errorf("step %d: reloads{failure} = %v, want %v", i, got, s.wantFails)
		}
	}
}

func TestRegisterStoreStatsReplaces(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg)
	m.RegisterStoreStats(func() StoreStats { return StoreStats{Buckets: 1, Bytes: 10} })
	m.RegisterStoreStats(func() StoreStats {
		return StoreStats{Buckets: 7, Bytes: 700, EvictedFull: 5, EvictedNotFull: 3, ForgivenMillitokens: 2500}
	})
	want := `
# HELP ratelimit_store_buckets Bucket items held by the store.
# TYPE ratelimit_store_buckets gauge
ratelimit_store_buckets 7
# HELP ratelimit_store_memory_bytes Approximate memory held by the store's bucket items.
# TYPE ratelimit_store_memory_bytes gauge
ratelimit_store_memory_bytes 700
# HELP ratelimit_store_evictions_total Buckets the embedded store dropped, by state: full (nothing lost) or not_full (evicted at MEMORY_MAX_BYTES or MEMORY_MAX_BUCKETS, its deficit forgiven).
# TYPE ratelimit_store_evictions_total counter
ratelimit_store_evictions_total{state="full"} 5
ratelimit_store_evictions_total{state="not_full"} 3
# HELP ratelimit_store_evicted_deficit_millitokens_total Millitokens the buckets evicted while not full lacked of full: the most those evictions can have admitted beyond the limits.
# TYPE ratelimit_store_evicted_deficit_millitokens_total counter
ratelimit_store_evicted_deficit_millitokens_total 2500
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "ratelimit_store_buckets", "ratelimit_store_memory_bytes", "ratelimit_store_evictions_total", "ratelimit_store_evicted_deficit_millitokens_total"); err != nil {
		t.Errorf("GatherAndCompare() = %v", err)
	}
	m.RegisterStoreStats(nil)
	if got := m.readStoreStats(); got != (StoreStats{}) {
		t.Errorf("readStoreStats() after nil = %+v, want zeros", got)
	}
}

func TestNewTwiceSharesCollectors(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, b := New(reg), New(reg)
	a.ObserveStore(StoreError, 0)
	b.ObserveStore(StoreError, 0)
	if got := testutil.ToFloat64(a.storeErrors); got != 2 {
		t.Errorf("store errors after two instances = %v, want 2", got)
	}
}

func TestNilMetricsIsNoop(t *testing.T) {
	var m *Metrics
	m.ObserveDecision("d", true, 0)
	m.ObserveRule("k", RuleHits{Total: 1})
	m.ObserveStore(StoreAdmitted, 0)
	m.OnUnavailable(true)
	m.InvalidRequest("r")
	m.ObserveReload(true, time.Now())
	m.RegisterStoreStats(func() StoreStats { return StoreStats{} })
	if m.Registerer() != nil {
		t.Errorf("(*Metrics)(nil).Registerer() = non-nil, want nil")
	}
}

func TestNilRegistererBuildsUnregistered(t *testing.T) {
	m := New(nil)
	m.ObserveDecision("d", false, 0)
	m.RegisterStoreStats(func() StoreStats { return StoreStats{Buckets: 1, Bytes: 1} })
	if got := testutil.ToFloat64(m.decisions.WithLabelValues("d", CodeOK)); got != 1 {
		t.Errorf("decisions = %v, want 1", got)
	}
}

func BenchmarkObserveDecision(b *testing.B) {
	m := New(prometheus.NewRegistry())
	b.ReportAllocs()
	for b.Loop() {
		m.ObserveDecision("api", false, 50*time.Microsecond)
		m.ObserveRule("api.user", RuleHits{Total: 1, WithinLimit: 1})
	}
}
