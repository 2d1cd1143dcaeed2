package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	cache "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/dynalimit/dynalimit/internal/xdstest"
)

// TestBinaryAsEnvoyGatewayRunsIt starts the binary with the environment and
// the extra argument of Envoy Gateway's ratelimit deployment (Redis settings
// it must ignore, the Prometheus listener its dashboard scrapes, the
// descriptor configuration over ADS from an xDS server, forced start): it is
// healthy at once, answers OK before the first push, enforces the pushed
// limit after it, and its scrape at PROMETHEUS_ADDR carries the metric the
// dashboard reads.
func TestBinaryAsEnvoyGatewayRunsIt(t *testing.T) {
	const node = "envoy-ratelimit"
	snap := cache.NewSnapshotCache(true, cache.IDHash{}, nil)
	xds := xdstest.Start(t, snap, "127.0.0.1:0", nil)
	prom := fmt.Sprintf("127.0.0.1:%d", freePort(t)) // Envoy Gateway: :19001
	p := startBinaryArgs(t, []string{"--quotaRateLimitServiceAddr=x:1"},
		"REDIS_SOCKET_TYPE=tcp",
		"REDIS_URL=redis.envoy-gateway-system.svc.cluster.local:6379",
		"USE_STATSD=false",
		"USE_PROMETHEUS=true",
		"PROMETHEUS_ADDR="+prom,
		"PROMETHEUS_PATH=/metrics",
		"FORCE_START_WITHOUT_INITIAL_CONFIG=true",
		"CONFIG_TYPE=GRPC_XDS_SOTW",
		"CONFIG_GRPC_XDS_NODE_ID="+node,
		"CONFIG_GRPC_XDS_SERVER_URL="+xds.Addr(),
	)
	for _, ignored := range []string{"REDIS_URL", "--quotaRateLimitServiceAddr=x:1"} {
		if !strings.Contains(p.out.String(), ignored) {
			t.Errorf("start-up log does not name the ignored %s:\n%s", ignored, p.out.String())
		}
	}

	cc, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health Check() = %v, %v, want SERVING", h.GetStatus(), err)
	}

	rls := pb.NewRateLimitServiceClient(cc)
	ask := func(user string) *pb.RateLimitResponse {
		t.Helper()
		resp, err := rls.ShouldRateLimit(ctx, &pb.RateLimitRequest{
			Domain:      "eg",
			Descriptors: []*rlv3.RateLimitDescriptor{descriptor("user", user)},
		})
		if err != nil {
			t.Fatalf("ShouldRateLimit(%s) = %v", user, err)
		}
		return resp
	}
	for i := range 3 {
		if got := ask("alice").GetOverallCode(); got != pb.RateLimitResponse_OK {
			t.Fatalf("call %d before the first push = %v, want OK", i, got)
		}
	}

	xdstest.Push(t, snap, node, "1", &rlsconf.RateLimitConfig{Name: "eg", Domain: "eg", Descriptors: []*rlsconf.RateLimitDescriptor{{
		Key:       "user",
		RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_MINUTE, RequestsPerUnit: 2},
	}}})
	// A probe of its own bucket shows when the pushed limit applies.
	for deadline := time.Now().Add(15 * time.Second); ask("probe").GetStatuses()[0].GetCurrentLimit() == nil; {
		if time.Now().After(deadline) {
			t.Fatalf("the pushed config did not apply within 15s:\n%s", p.out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	want := []pb.RateLimitResponse_Code{pb.RateLimitResponse_OK, pb.RateLimitResponse_OK, pb.RateLimitResponse_OVER_LIMIT}
	for i, w := range want {
		if got := ask("bob").GetOverallCode(); got != w {
			t.Errorf("call %d after the push = %v, want %v", i, got, w)
		}
	}

	url := "http://" + prom + "/metrics"
	if got := scrape(t, url, "ratelimit_service_rate_limit_total_hits", `domain="eg"`, `key1="user"`); got < 4 {
		t.Errorf("%s: ratelimit_service_rate_limit_total_hits{domain=\"eg\",key1=\"user\"} = %v, want at least 4 (three for bob, one probe)", url, got)
	}
	if got := scrape(t, url, "ratelimit_service_rate_limit_over_limit", `domain="eg"`, `key1="user"`); got < 1 {
		t.Errorf("%s: ratelimit_service_rate_limit_over_limit{domain=\"eg\",key1=\"user\"} = %v, want at least 1", url, got)
	}
}
