package metrics

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
)

// series renders the ratelimit_service_* samples of g as
// name{label="value",…} value lines, sorted.
func series(t *testing.T, g prometheus.Gatherer) []string {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "ratelimit_service_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			v := m.GetCounter().GetValue()
			if h := m.GetHistogram(); h != nil {
				v = float64(h.GetSampleCount())
			}
			out = append(out, fmt.Sprintf("%s{%s} %g", mf.GetName(), strings.Join(ls, ","), v))
		}
	}
	sort.Strings(out)
	return out
}

// drive records the same traffic on m and c.
func drive(t *testing.T, m *Metrics, c *Compat) {
	t.Helper()
	m.ObserveRule("rl.generic_key_demo", RuleHits{Total: 4, OverLimit: 1, WithinLimit: 3, NearLimit: 1})
	m.ObserveRule("rl.remote_address_10.0.0.1", RuleHits{Total: 1, WithinLimit: 1}) // as its keys carry values
	m.ObserveRule("rl.api_key.path_/v1", RuleHits{Total: 2, OverLimit: 2, ShadowMode: 2})
	m.ObserveRule("rl.a_1.b_2.c_3", RuleHits{Total: 1, WithinLimit: 1})
	m.ObserveReload(true, time.Now())
	m.InvalidRequest("domain")
	m.ObserveStore(StoreError, time.Millisecond)
	call := c.UnaryInterceptor()
	for range 3 {
		_, _ = call(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"},
			func(context.Context, any) (any, error) { return nil, nil })
	}
}

func runCompat(t *testing.T, o CompatOptions) (*Metrics, *Compat, prometheus.Gatherer) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m := New(reg)
	c, err := NewCompat(reg, o)
	if err != nil {
		t.Fatal(err)
	}
	m.SetCompat(c)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run() = %v", err)
		}
	})
	for !c.isRunning() {
		time.Sleep(time.Millisecond)
	}
	return m, c, c.Gatherer(reg)
}

// TestCompatMatchesEnvoyproxyRatelimitMapping: the same traffic gives the
// same Prometheus series through our default mapping as through
// envoyproxy/ratelimit's default mapping (recorded in testdata), and the
// names its dashboards read are among them.
func TestCompatMatchesEnvoyproxyRatelimitMapping(t *testing.T) {
	mOurs, cOurs, gOurs := runCompat(t, CompatOptions{})
	mTheirs, cTheirs, gTheirs := runCompat(t, CompatOptions{MapperYAMLPath: "testdata/envoyproxy-ratelimit-default_mapper.yaml"})
	drive(t, mOurs, cOurs)
	drive(t, mTheirs, cTheirs)
	ours, theirs := series(t, gOurs), series(t, gTheirs)
	if !slices.Equal(ours, theirs) {
		t.Errorf("series with our mapping:\n%s\nwith envoyproxy/ratelimit's:\n%s", strings.Join(ours, "\n"), strings.Join(theirs, "\n"))
	}
	for _, want := range []string{
		`ratelimit_service_rate_limit_total_hits{domain="rl",key1="generic_key_demo"} 4`,
		`ratelimit_service_rate_limit_over_limit{domain="rl",key1="generic_key_demo"} 1`,
		`ratelimit_service_rate_limit_near_limit{domain="rl",key1="generic_key_demo"} 1`,
		`ratelimit_service_rate_limit_within_limit{domain="rl",key1="generic_key_demo"} 3`,
		`ratelimit_service_rate_limit_shadow_mode{domain="rl",key1="api_key",key2="path_/v1"} 2`,
		`ratelimit_service_rate_limit_total_hits{domain="rl",key1="a_1",key2="b_2"} 1`,
		`ratelimit_service_total_requests{grpc_method="ShouldRateLimit"} 3`,
		`ratelimit_service_response_time_seconds{grpc_method="ShouldRateLimit"} 3`,
		`ratelimit_service_config_load_success{} 1`,
		`ratelimit_service_should_rate_limit_error{err_type="service_error"} 1`,
		`ratelimit_service_should_rate_limit_error{err_type="redis_error"} 1`,
	} {
		if !slices.Contains(ours, want) {
			t.Errorf("scrape lacks %s; has:\n%s", want, strings.Join(ours, "\n"))
		}
	}
}

func TestCompatBadMapper(t *testing.T) {
	if _, err := NewCompat(prometheus.NewRegistry(), CompatOptions{MapperYAMLPath: "testdata/missing.yaml"}); err == nil {
		t.Error("NewCompat(missing mapper) = nil error, want one")
	}
}

func TestTagSuffix(t *testing.T) {
	if got, want := tagSuffix(map[string]string{"zzz": "hello", "q": "r"}), ".__q=r.__zzz=hello"; got != want {
		t.Errorf("tagSuffix() = %q, want %q", got, want)
	}
}

// TestCompatCountsResponseTimesAsEvents: response times bypass the
// exporter's events, and its own statistics still count each as one (an
// observer event, mapped), as they did when each was an event.
func TestCompatCountsResponseTimesAsEvents(t *testing.T) {
	m, c, g := runCompat(t, CompatOptions{})
	drive(t, m, c)
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	observers := -1.0
	for _, mf := range mfs {
		if mf.GetName() != "statsd_exporter_events_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "type" && l.GetValue() == "observer" {
					observers = m.GetCounter().GetValue()
				}
			}
		}
	}
	if observers != 3 {
		t.Errorf("statsd_exporter_events_total{type=\"observer\"} = %v, want 3 (one per call)", observers)
	}
}
