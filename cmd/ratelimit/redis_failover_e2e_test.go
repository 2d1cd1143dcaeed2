package main

import (
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/dynalimit/dynalimit/internal/redisstore"
	"github.com/dynalimit/dynalimit/internal/redistest"
	"github.com/dynalimit/dynalimit/internal/testutil"
	"github.com/dynalimit/dynalimit/pkg/cascade"
)

// failoverRun drives 90 callers over three replicas started with env on
// one hot key of 10/s with a burst of 100 for 8 s, calling fail 3 s in,
// and checks the fleet admitted at most 1.2 × (100 + 10·t) with no
// error; it logs the answers decided locally meanwhile.
func failoverRun(t *testing.T, what string, env []string, fail func()) {
	t.Helper()
	testutil.BusyCore(t)
	f := startFleetEnv(t, coldConfig, 3, append([]string{"LOG_LEVEL=warn", "BACKEND_TIMEOUT=50ms"}, env...))
	f.counted(t)
	req := &pb.RateLimitRequest{Domain: "fleet", Descriptors: []*rlv3.RateLimitDescriptor{descriptor("cold", "hot")}}
	done := make(chan *load)
	go func() { done <- f.driveWith(90, 8*time.Second, func(int) *pb.RateLimitRequest { return req }, nil) }()
	time.Sleep(3 * time.Second)
	start := time.Now()
	fail()
	t.Logf("%s took %v", what, time.Since(start).Round(time.Millisecond))
	l := <-done
	bound := 100 + 10*l.elapsed.Seconds()
	t.Logf("hot key through %s: admitted %d of %.0f (%.3f), local decisions %.0f (allowed %.0f), errors %d",
		what, l.ok.Load(), bound, float64(l.ok.Load())/bound, f.metric(t, "ratelimit_local_decisions_total"),
		f.metric(t, "ratelimit_local_decisions_total", `decision="allowed"`), l.errs.Load())
	if got := float64(l.ok.Load()); got > 1.2*bound {
		t.Errorf("admitted %.0f, want at most 1.2 × %.0f", got, bound)
	}
	if n := l.errs.Load(); n > 0 {
		t.Errorf("%d calls failed, want none; first: %v", n, l.firstErr.Load())
	}
}

// TestRedisClusterFailover: three replicas on a cluster of three masters
// with a replica each (REDIS_TYPE=cluster); the master holding the hot
// key is killed mid-run and its replica promoted. The fleet admits at
// most 1.2 × the limit, the answers meanwhile are decided locally (and
// counted so), and none fails.
func TestRedisClusterFailover(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 1, redistest.Options{})
	ns := "failover"
	key := redisstore.BucketKey(ns, cascade.Key{Entity: "cold=hot", Resource: "fleet"})
	master := cl.MasterOf(key)
	env := []string{"BACKEND_TYPE=redis", "REDIS_TYPE=cluster", "REDIS_URL=" + strings.Join(cl.Seeds(), ","), "NAMESPACE=" + ns}
	failoverRun(t, "a cluster failover (master killed)", env, func() { cl.KillMaster(master) })
}

// TestRedisSentinelFailover: three replicas on a master and its replica
// watched by three sentinels (REDIS_TYPE=sentinel); a failover mid-run.
// The fleet admits at most 1.2 × the limit and no call fails.
func TestRedisSentinelFailover(t *testing.T) {
	st := redistest.StartSentinel(t, redistest.Options{})
	env := []string{"BACKEND_TYPE=redis", "REDIS_TYPE=sentinel", "REDIS_URL=" + redistest.MasterName + "," + strings.Join(st.Addrs(), ","), "NAMESPACE=sentinel"}
	failoverRun(t, "a sentinel failover", env, func() { st.Failover() })
}
