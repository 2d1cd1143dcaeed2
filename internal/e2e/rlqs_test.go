package e2e

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/dynalimit/dynalimit/internal/envoytest"
)

const rlqsBootstrap = "examples/envoy/envoy-rlqs.yaml"

// TestRLQS: Envoy's rate_limit_quota filter on examples/envoy/envoy-rlqs.yaml
// enforces the token bucket the service assigns (tenant 100/s) with no call
// in the request path; its reports charge the same bucket that
// ShouldRateLimit decides on, so that both kinds of traffic together stay
// within the limit; the service counts the stream, the bucket and the
// assignments.
func TestRLQS(t *testing.T) {
	// Not beside TestRLQSFleet: its 4 callers as fast as Envoy answers
	// took the cores the fleet's first shares converge on.
	envoytest.Scenario(t, "14 RLQS: Envoy enforces its share locally; RLS and RLQS share one limit")
	r := envoytest.Start(t, envoytest.Options{Bootstrap: rlqsBootstrap, ConfigDir: configDir})
	c := envoytest.Client(t, "127.0.0.2")
	if resp := r.Do(t, c, http.MethodGet, "/", "x-tenant", "acme"); resp.Status != http.StatusOK {
		t.Fatalf("first request: %d", resp.Status)
	}
	rls := rlsClient(t, r.Service.GRPCPort)

	// 22 s of as many requests as 4 clients send, and 20 ShouldRateLimit
	// calls a second on the same descriptor; counted after the first two
	// report intervals (10 s).
	const run, settle = 22 * time.Second, 10 * time.Second
	var rlqsOK, rlqs429, rlsOK, rlsCalls atomic.Int64
	start := time.Now()
	ctx, cancel := context.WithDeadline(context.Background(), start.Add(run))
	defer cancel()
	counted := func() bool { return time.Since(start) >= settle }
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for ctx.Err() == nil {
				resp, err := r.DoErr(c, http.MethodGet, "/", "x-tenant", "acme")
				switch {
				case err != nil || !counted():
				case resp.Status == http.StatusOK:
					rlqsOK.Add(1)
				case resp.Status == http.StatusTooManyRequests:
					rlqs429.Add(1)
				}
			}
		})
	}
	wg.Go(func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for ctx.Err() == nil {
			<-tick.C
			if ok := rls(t, "acme"); counted() {
				rlsCalls.Add(1)
				if ok {
					rlsOK.Add(1)
				}
			}
		}
	})
	wg.Wait()
	secs := (run - settle).Seconds()
	total := float64(rlqsOK.Load() + rlsOK.Load())
	t.Logf("after %v: RLQS %d admitted, %d refused by Envoy; RLS %d of %d admitted; together %.1f/s of a 100/s limit",
		settle, rlqsOK.Load(), rlqs429.Load(), rlsOK.Load(), rlsCalls.Load(), total/secs)
	if rlqs429.Load() == 0 {
		t.Errorf("Envoy refused nothing: no assignment enforced")
	}
	// The limit, with its burst of 100 once.
	if max := 100*secs*1.05 + 100; total > max {
		t.Errorf("RLS and RLQS admitted %.0f together, more than %.0f", total, max)
	}
	if min := 100 * secs * 0.8; total < min {
		t.Errorf("RLS and RLQS admitted %.0f together, fewer than %.0f", total, min)
	}
	m := r.Service.Metrics(t)
	if m["ratelimit_rlqs_streams"] < 1 || m["ratelimit_rlqs_buckets"] < 1 || m[`ratelimit_rlqs_assignments_total{kind="token_bucket"}`] < 2 {
		t.Errorf("metrics: streams %v buckets %v token buckets pushed %v", m["ratelimit_rlqs_streams"], m["ratelimit_rlqs_buckets"], m[`ratelimit_rlqs_assignments_total{kind="token_bucket"}`])
	}

}

// rlsClient returns a function asking the service whether one request of
// tenant is admitted (ShouldRateLimit, domain quota).
func rlsClient(t *testing.T, port int) func(t *testing.T, tenant string) bool {
	t.Helper()
	cc, err := grpc.NewClient("127.0.0.1:"+strconv.Itoa(port), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	client := pb.NewRateLimitServiceClient(cc)
	return func(t *testing.T, tenant string) bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		resp, err := client.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "quota", Descriptors: []*rlv3.RateLimitDescriptor{{
			Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: tenant}},
		}}})
		if err != nil {
			t.Error(err)
			return false
		}
		return resp.GetOverallCode() == pb.RateLimitResponse_OK
	}
}
