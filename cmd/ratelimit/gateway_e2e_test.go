package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	cache "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/dynalimit/dynalimit/internal/testutil"
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
	prom := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t)) // Envoy Gateway: :19001
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
		if !strings.Contains(p.Output(), ignored) {
			t.Errorf("start-up log does not name the ignored %s:\n%s", ignored, p.Output())
		}
	}

	cc, err := grpc.NewClient(p.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
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
			t.Fatalf("the pushed config did not apply within 15s:\n%s", p.Output())
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

// egMapping is a statsd-exporter mapping in the form Envoy Gateway mounts
// for PROMETHEUS_MAPPER_YAML: the names its Grafana dashboard queries, with
// domain and key1 labels.
const egMapping = `mappings:
  - match: "ratelimit.service.rate_limit.*.*.total_hits"
    name: "ratelimit_service_rate_limit_total_hits"
    labels: {domain: "$1", key1: "$2"}
  - match: "ratelimit.service.rate_limit.*.*.over_limit"
    name: "ratelimit_service_rate_limit_over_limit"
    labels: {domain: "$1", key1: "$2"}
  - match: "ratelimit.service.rate_limit.*.*.within_limit"
    name: "ratelimit_service_rate_limit_within_limit"
    labels: {domain: "$1", key1: "$2"}
`

// TestBinaryAsEnvoyGatewayRunsItWithMTLSAndDynamoDB starts the binary with
// the whole environment of Envoy Gateway's ratelimit deployment (Redis
// settings it must ignore, its runtime settings, xDS over mTLS with its
// certificates, RLS over TLS with client certificates required, Prometheus
// at PROMETHEUS_ADDR with its mapper file) plus BACKEND_TYPE=dynamodb, and
// its extra argument: it comes up healthy, answers OK before the first push,
// enforces the config pushed over mTLS xDS on DynamoDB, refuses a client
// without a certificate, serves the dashboard's metric names, and resyncs a
// changed config after the xDS server restarts.
func TestBinaryAsEnvoyGatewayRunsItWithMTLSAndDynamoDB(t *testing.T) {
	const node = "envoy-ratelimit"
	pki := testutil.NewPKI(t)
	table := dynamoEnv(t, "BACKEND_TIMEOUT=400ms")

	serverCert, err := tls.LoadX509KeyPair(pki.ServerCert, pki.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	xdsCreds := credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{serverCert},
		ClientCAs:    pki.CA, ClientAuth: tls.RequireAndVerifyClientCert,
		MinVersion: tls.VersionTLS12,
	})
	snap := cache.NewSnapshotCache(true, cache.IDHash{}, nil)
	xds := xdstest.Start(t, snap, "127.0.0.1:0", xdsCreds)
	mapper := filepath.Join(t.TempDir(), "conf.yaml")
	if err := os.WriteFile(mapper, []byte(egMapping), 0o600); err != nil {
		t.Fatal(err)
	}
	prom := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t)) // Envoy Gateway: :19001
	env := append([]string{
		"REDIS_SOCKET_TYPE=tcp",
		"REDIS_URL=redis.envoy-gateway-system.svc.cluster.local:6379",
		"RUNTIME_ROOT=" + t.TempDir(),
		"RUNTIME_SUBDIRECTORY=ratelimit",
		"RUNTIME_IGNOREDOTFILES=true",
		"RUNTIME_WATCH_ROOT=false",
		"LOG_LEVEL=info",
		"USE_STATSD=false",
		"CONFIG_TYPE=GRPC_XDS_SOTW",
		"CONFIG_GRPC_XDS_SERVER_URL=" + xds.Addr(),
		"CONFIG_GRPC_XDS_NODE_ID=" + node,
		"CONFIG_GRPC_XDS_SERVER_USE_TLS=true",
		"CONFIG_GRPC_XDS_CLIENT_TLS_CERT=" + pki.ClientCert,
		"CONFIG_GRPC_XDS_CLIENT_TLS_KEY=" + pki.ClientKey,
		"CONFIG_GRPC_XDS_SERVER_TLS_CACERT=" + pki.CAFile,
		"FORCE_START_WITHOUT_INITIAL_CONFIG=true",
		"GRPC_SERVER_USE_TLS=true",
		"GRPC_SERVER_TLS_CERT=" + pki.ServerCert,
		"GRPC_SERVER_TLS_KEY=" + pki.ServerKey,
		"GRPC_CLIENT_TLS_CACERT=" + pki.CAFile,
		"USE_PROMETHEUS=true",
		"PROMETHEUS_ADDR=" + prom,
		"PROMETHEUS_PATH=/metrics",
		"PROMETHEUS_MAPPER_YAML=" + mapper,
	}, table...)
	p := startBinaryArgs(t, []string{"--quotaRateLimitServiceAddr=envoy-ratelimit.envoy-gateway-system.svc.cluster.local:8081"}, env...)

	dial := func(cfg *tls.Config) pb.RateLimitServiceClient {
		cc, err := grpc.NewClient(p.GRPCAddr(), grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cc.Close() })
		return pb.NewRateLimitServiceClient(cc)
	}
	rls := dial(&tls.Config{RootCAs: pki.CA, Certificates: []tls.Certificate{pki.Client}, MinVersion: tls.VersionTLS12})
	ask := func(c pb.RateLimitServiceClient, key, value string) (*pb.RateLimitResponse, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return c.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "eg", Descriptors: []*rlv3.RateLimitDescriptor{descriptor(key, value)}})
	}
	must := func(key, value string) *pb.RateLimitResponse {
		t.Helper()
		resp, err := ask(rls, key, value)
		if err != nil {
			t.Fatalf("ShouldRateLimit(%s=%s) over mTLS = %v\n%s", key, value, err, p.Output())
		}
		return resp
	}
	// applied waits until key's pushed limit is in force, asking on a probe
	// value of its own.
	applied := func(key string, within time.Duration) {
		t.Helper()
		for deadline := time.Now().Add(within); must(key, "probe").GetStatuses()[0].GetCurrentLimit() == nil; {
			if time.Now().After(deadline) {
				t.Fatalf("the pushed limit on %s did not apply within %v (NACKs %v):\n%s", key, within, xds.NACKs(), p.Output())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	for i := range 3 {
		if got := must("user", "alice").GetOverallCode(); got != pb.RateLimitResponse_OK {
			t.Fatalf("call %d before the first push = %v, want OK", i, got)
		}
	}
	if _, err := ask(dial(&tls.Config{RootCAs: pki.CA, MinVersion: tls.VersionTLS12}), "user", "alice"); err == nil {
		t.Error("a client without a certificate was answered, want refused (mTLS)")
	}

	policy := func(key string, rpu uint32) *rlsconf.RateLimitDescriptor {
		return &rlsconf.RateLimitDescriptor{Key: key, RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_MINUTE, RequestsPerUnit: rpu}}
	}
	xdstest.Push(t, snap, node, "1", &rlsconf.RateLimitConfig{Name: "eg", Domain: "eg", Descriptors: []*rlsconf.RateLimitDescriptor{policy("user", 2)}})
	applied("user", 20*time.Second)
	for i, w := range []pb.RateLimitResponse_Code{pb.RateLimitResponse_OK, pb.RateLimitResponse_OK, pb.RateLimitResponse_OVER_LIMIT} {
		if got := must("user", "bob").GetOverallCode(); got != w {
			t.Errorf("call %d after the push = %v, want %v", i, got, w)
		}
	}
	if got := scrape(t, "http://"+p.DebugAddr()+"/metrics", "ratelimit_dynamodb_calls_total", `operation="UpdateItem"`); got < 1 {
		t.Errorf("ratelimit_dynamodb_calls_total{operation=UpdateItem} = %v, want the decisions made on DynamoDB", got)
	}

	url := "http://" + prom + "/metrics"
	for _, m := range []struct {
		name string
		min  float64
	}{{"ratelimit_service_rate_limit_total_hits", 4}, {"ratelimit_service_rate_limit_over_limit", 1}, {"ratelimit_service_rate_limit_within_limit", 3}} {
		if got := scrape(t, url, m.name, `domain="eg"`, `key1="user"`); got < m.min {
			t.Errorf("%s: %s{domain=\"eg\",key1=\"user\"} = %v, want at least %v", url, m.name, got, m.min)
		}
	}

	// The xDS server restarts on the same address with a changed config:
	// the service reconnects (over mTLS again, after the old service's
	// default backoff: 10 s ± 50%, then up to 60 s) and applies it.
	addr := xds.Addr()
	xds.Stop()
	snap2 := cache.NewSnapshotCache(true, cache.IDHash{}, nil)
	xdstest.Push(t, snap2, node, "2", &rlsconf.RateLimitConfig{Name: "eg", Domain: "eg", Descriptors: []*rlsconf.RateLimitDescriptor{policy("user", 2), policy("team", 1)}})
	xds2 := xdstest.Start(t, snap2, addr, xdsCreds)
	start := time.Now()
	applied("team", 90*time.Second)
	t.Logf("resynced %v after the xDS server restarted", time.Since(start).Round(100*time.Millisecond))
	for i, w := range []pb.RateLimitResponse_Code{pb.RateLimitResponse_OK, pb.RateLimitResponse_OVER_LIMIT} {
		if got := must("team", "red").GetOverallCode(); got != w {
			t.Errorf("call %d after the xDS server restarted = %v, want %v", i, got, w)
		}
	}
	if n := xds2.NACKs(); len(n) != 0 {
		t.Errorf("NACKs after the restart: %v", n)
	}
}
