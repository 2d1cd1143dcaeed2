package envoytest

import (
	"fmt"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/internal/testutil"
)

// Service is the ratelimit binary serving on loopback ports of its own.
// Start and Stop fail the test that started it.
type Service struct {
	*testutil.Server
	t testing.TB
}

// StartService runs `ratelimit serve -config_dir configDir` with env added
// to the environment and waits until /healthcheck answers 200. The cleanup
// stops it and logs its output when t failed.
func StartService(t testing.TB, configDir string, env ...string) *Service {
	t.Helper()
	srv := testutil.StartServer(t, testutil.ServerOptions{
		Args:      []string{"serve", "-config_dir", configDir},
		Env:       append([]string{"SHUTDOWN_DRAIN=0s", "LOG_FORMAT=text", "LOG_LEVEL=warn"}, env...),
		StopGrace: 10 * time.Second,
	})
	return &Service{Server: srv, t: t}
}

// Start starts the binary again after Stop, on the same ports.
func (s *Service) Start() {
	s.t.Helper()
	if err := s.Server.Start(); err != nil {
		s.t.Fatal(err)
	}
}

// Stop stops the binary (SIGTERM, then SIGKILL after 10 s) and waits for it.
// Stopping a stopped service does nothing.
func (s *Service) Stop() {
	if err := s.Server.Stop(); err != nil {
		s.t.Error(err)
	}
}

// Metrics returns the samples of the service's Prometheus metrics, keyed by
// the series as the exposition prints it, e.g.
// `ratelimit_decisions_total{code="OK",domain="edge"}`.
func (s *Service) Metrics(t testing.TB) map[string]float64 {
	t.Helper()
	return testutil.ScrapeMetrics(t, fmt.Sprintf("http://127.0.0.1:%d/metrics", s.DebugPort))
}
