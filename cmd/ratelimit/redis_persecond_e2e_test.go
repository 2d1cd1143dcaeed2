package main

import (
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/dynalimit/dynalimit/internal/redistest"
)

const perSecondConfig = `domain: fleet
descriptors:
  - key: sec
    rate_limit:
      unit: second
      requests_per_unit: 5
  - key: min
    rate_limit:
      unit: minute
      requests_per_unit: 3
`

// TestRedisPerSecond: two replicas with REDIS_PERSECOND=true, as
// envoyproxy/ratelimit's users set it, on two redis-servers. A limit of a
// minute is decided on the first Redis and one of a second on the other,
// each exactly across both replicas, and neither Redis runs the other's
// decisions.
func TestRedisPerSecond(t *testing.T) {
	first, perSecond := redistest.Start(t, redistest.Options{}), redistest.Start(t, redistest.Options{})
	f := startFleetEnv(t, perSecondConfig, 2, []string{"LOG_LEVEL=warn", "BACKEND_TYPE=redis",
		"REDIS_URL=" + first.Addr(), "REDIS_PERSECOND=true", "REDIS_PERSECOND_URL=" + perSecond.Addr(), "ON_UNAVAILABLE=block"})
	calls := func() (float64, float64) {
		m, s := first.CommandStats(), perSecond.CommandStats()
		return float64(m["evalsha"] + m["eval"]), float64(s["evalsha"] + s["eval"])
	}
	ask := func(key string, n int) (admitted int) {
		req := &pb.RateLimitRequest{Domain: "fleet", Descriptors: []*rlv3.RateLimitDescriptor{descriptor(key, "x")}}
		for i := range n {
			resp, err := f.clients[i%2].ShouldRateLimit(t.Context(), req)
			if err != nil {
				t.Fatalf("ShouldRateLimit(%s): %v", key, err)
			}
			if resp.GetOverallCode() == pb.RateLimitResponse_OK {
				admitted++
			}
		}
		return admitted
	}

	m0, s0 := calls()
	if got := ask("min", 10); got != 3 {
		t.Errorf("3 a minute over two replicas: %d of 10 admitted, want 3", got)
	}
	m1, s1 := calls()
	start := time.Now()
	got := ask("sec", 20)
	m2, s2 := calls()
	t.Logf("a minute's limit: %.0f script calls on the first Redis, %.0f on the per-second one; a second's: %.0f and %.0f; %d of 20 admitted in %v",
		m1-m0, s1-s0, m2-m1, s2-s1, got, time.Since(start).Round(time.Millisecond))
	if want := 5 + int(5*time.Since(start).Seconds()); got < 5 || got > want {
		t.Errorf("5 a second over two replicas: %d of 20 admitted, want 5 to %d", got, want)
	}
	if m1-m0 < 10 || s1-s0 != 0 {
		t.Errorf("a minute's limit ran %.0f script calls on the first Redis and %.0f on the per-second one, want 10 or more and 0", m1-m0, s1-s0)
	}
	if s2-s1 < 20 || m2-m1 != 0 {
		t.Errorf("a second's limit ran %.0f script calls on the per-second Redis and %.0f on the first, want 20 or more and 0", s2-s1, m2-m1)
	}
}
