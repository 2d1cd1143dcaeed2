package server

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestPrometheusListener(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "compat_probe_total", Help: "probe"})
	reg.MustRegister(c)
	c.Inc()
	s, cancel, done := start(t, Options{RateLimit: &okRLS{}, Gatherer: reg, PrometheusAddr: "127.0.0.1:0", PrometheusPath: "/stats/prometheus"})
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server stopped with %v", err)
		}
	}()
	code, body := get(t, "http://"+s.PrometheusAddr().String()+"/stats/prometheus")
	if code != 200 || !strings.Contains(body, "compat_probe_total 1") {
		t.Errorf("GET PROMETHEUS_PATH = %d %q, want the registry", code, body)
	}
	if code, _ := get(t, "http://"+s.PrometheusAddr().String()+"/metrics"); code != 404 {
		t.Errorf("GET /metrics on the Prometheus listener = %d, want 404 (path is PROMETHEUS_PATH)", code)
	}
}
