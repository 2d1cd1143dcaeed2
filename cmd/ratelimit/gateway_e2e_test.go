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

	"github.com/dynalimit/dynalimit/internal/redistest"
	"github.com/dynalimit/dynalimit/internal/testutil"
	"github.com/dynalimit/dynalimit/internal/xdstest"
)

// TestBinaryAsEnvoyGatewayRunsIt starts two replicas of the binary with the
// environment and the extra argument of Envoy Gateway's ratelimit
// deployment (its REDIS_SOCKET_TYPE and REDIS_URL, here a local
// redis-server, and no BACKEND_TYPE; the Prometheus listener its dashboard
// scrapes; the descriptor configuration over ADS from an xDS server;
// forced start): each says it chose Redis and is healthy, answers OK
// before the first push, and the limit pushed over xDS is enforced across
// both replicas, sharing Redis; the scrape at PROMETHEUS_ADDR carries the
// metric the dashboard reads.
func TestBinaryAsEnvoyGatewayRunsIt(t *testing.T) {
	const node = "envoy-ratelimit"
	redis := redistest.Start(t, redistest.Options{})
	snap := cache.NewSnapshotCache(true, cache.IDHash{}, nil)
	xds := xdstest.Start(t, snap, "127.0.0.1:0", nil)
	var procs []*proc
	var proms []string
	for range 2 {
		prom := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t)) // Envoy Gateway: :19001
		p := startBinaryArgs(t, []string{"--quotaRateLimitServiceAddr=x:1"},
			"REDIS_SOCKET_TYPE=tcp",
			"REDIS_URL="+redis.Addr(), // Envoy Gateway: redis.envoy-gateway-system.svc.cluster.local:6379
			"USE_STATSD=false",
			"USE_PROMETHEUS=true",
			"PROMETHEUS_ADDR="+prom,
			"PROMETHEUS_PATH=/metrics",
			"FORCE_START_WITHOUT_INITIAL_CONFIG=true",
			"CONFIG_TYPE=GRPC_XDS_SOTW",
			"CONFIG_GRPC_XDS_NODE_ID="+node,
			"CONFIG_GRPC_XDS_SERVER_URL="+xds.Addr(),
		)
		if !strings.Contains(p.Output(), "--quotaRateLimitServiceAddr=x:1") {
			t.Errorf("start-up log does not name the ignored --quotaRateLimitServiceAddr=x:1:\n%s", p.Output())
		}
		if !strings.Contains(p.Output(), "BACKEND_TYPE unset, REDIS_URL set: Redis") {
			t.Errorf("start-up log does not say the store is Redis:\n%s", p.Output())
		}
		procs = append(procs, p)
		proms = append(proms, prom)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var clients []pb.RateLimitServiceClient
	for _, p := range procs {
		cc, err := grpc.NewClient(p.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		h, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
		if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health Check() = %v, %v, want SERVING:\n%s", h.GetStatus(), err, p.Output())
		}
		clients = append(clients, pb.NewRateLimitServiceClient(cc))
	}
	ask := func(replica int, user string) *pb.RateLimitResponse {
		t.Helper()
		resp, err := clients[replica].ShouldRateLimit(ctx, &pb.RateLimitRequest{
			Domain:      "eg",
			Descriptors: []*rlv3.RateLimitDescriptor{descriptor("user", user)},
		})
		if err != nil {
			t.Fatalf("ShouldRateLimit(%s) = %v", user, err)
		}
		return resp
	}
	for i := range 3 {
		if got := ask(i%2, "alice").GetOverallCode(); got != pb.RateLimitResponse_OK {
			t.Fatalf("call %d before the first push = %v, want OK", i, got)
		}
	}

	xdstest.Push(t, snap, node, "1", &rlsconf.RateLimitConfig{Name: "eg", Domain: "eg", Descriptors: []*rlsconf.RateLimitDescriptor{{
		Key:       "user",
		RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_MINUTE, RequestsPerUnit: 2},
	}}})
	// A probe of its own bucket shows when the pushed limit applies.
	for r := range procs {
		for deadline := time.Now().Add(15 * time.Second); ask(r, "probe").GetStatuses()[0].GetCurrentLimit() == nil; {
			if time.Now().After(deadline) {
				t.Fatalf("the pushed config did not apply within 15s:\n%s", procs[r].Output())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	want := []pb.RateLimitResponse_Code{pb.RateLimitResponse_OK, pb.RateLimitResponse_OK, pb.RateLimitResponse_OVER_LIMIT, pb.RateLimitResponse_OVER_LIMIT}
	for i, w := range want {
		if got := ask(i%2, "bob").GetOverallCode(); got != w {
			t.Errorf("call %d after the push, on replica %d = %v, want %v: 2 a minute across both replicas", i, i%2, got, w)
		}
	}

	url := "http://" + proms[0] + "/metrics"
	if got := scrape(t, url, "ratelimit_service_rate_limit_total_hits", `domain="eg"`, `key1="user"`); got < 2 {
		t.Errorf("%s: ratelimit_service_rate_limit_total_hits{domain=\"eg\",key1=\"user\"} = %v, want at least 2 (two for bob, one probe)", url, got)
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
