package metrics_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/dynalimit/dynalimit/internal/metrics"
	"github.com/dynalimit/dynalimit/internal/redisstore"
)

// TestRedisObserver: each call is counted by outcome, timed, and its
// plans observed.
func TestRedisObserver(t *testing.T) {
	reg := prometheus.NewRegistry()
	o := metrics.RedisObserver(reg)
	o.Call(redisstore.CallOK, 12, 2*time.Millisecond)
	o.Call(redisstore.CallTimeout, 3, 50*time.Millisecond)
	n, err := testutil.GatherAndCount(reg, "ratelimit_redis_calls_total", "ratelimit_redis_call_duration_seconds", "ratelimit_redis_batch_decisions")
	if err != nil || n != 4 {
		t.Errorf("series = %d, %v; want 4 (two outcomes, the latency, the batch)", n, err)
	}
}
