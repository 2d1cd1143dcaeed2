package server

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// TestGRPCOnUnixSocket: with GRPCUDS, gRPC answers on the socket (as
// envoyproxy/ratelimit's GRPC_UDS does), a stale socket file is replaced,
// and the file is gone after the server stops.
func TestGRPCOnUnixSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "rl.sock")
	stale, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	_ = stale.Close() // leaves the file behind, as a killed process does

	s, cancel, done := start(t, Options{RateLimit: &okRLS{}, GRPCUDS: sock})
	if addr, _, _ := s.Addrs(); addr.Network() != "unix" || addr.String() != sock {
		t.Errorf("Addrs() grpc = %s %s, want unix %s", addr.Network(), addr, sock)
	}
	cc, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancelCall := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelCall()
	resp, err := pb.NewRateLimitServiceClient(cc).ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "d"})
	if err != nil || resp.GetOverallCode() != pb.RateLimitResponse_OK {
		t.Fatalf("ShouldRateLimit over %s = %v, %v; want OK", sock, resp, err)
	}
	if _, err := New(Options{RateLimit: &okRLS{}, GRPCUDS: sock, HTTPAddr: "127.0.0.1:0", DebugAddr: "127.0.0.1:0", Logger: quietLogger()}); err == nil ||
		err.Error() != "server: gRPC unix socket "+sock+": address already in use (is another ratelimit running? set GRPC_UDS or -grpc_uds to move it)" {
		t.Errorf("New() on a served socket = %v, want a refusal naming GRPC_UDS", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Errorf("socket file after stop: %v, want it removed", err)
	}
}

func TestGRPCUDSRefusesNonSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := New(Options{RateLimit: &okRLS{}, GRPCUDS: path, HTTPAddr: "127.0.0.1:0", DebugAddr: "127.0.0.1:0", Logger: quietLogger()})
	if err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("New(GRPCUDS=regular file) = %v, want a refusal", err)
	}
}

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

// TestWaitReady: health is NOT_SERVING until SetReady(true), follows it, and
// stays NOT_SERVING once shutdown began.
func TestWaitReady(t *testing.T) {
	o := Options{RateLimit: &okRLS{}, WaitReady: true, Drain: 200 * time.Millisecond,
		GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", DebugAddr: "127.0.0.1:0", Logger: quietLogger()}
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	cc := dial(t, s)
	check := func() healthpb.HealthCheckResponse_ServingStatus {
		r, err := healthpb.NewHealthClient(cc).Check(context.Background(), &healthpb.HealthCheckRequest{Service: rlsName})
		if err != nil {
			return healthpb.HealthCheckResponse_UNKNOWN
		}
		return r.GetStatus()
	}
	time.Sleep(50 * time.Millisecond)
	if got := check(); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("health before SetReady = %v, want NOT_SERVING", got)
	}
	s.SetReady(true)
	if got := check(); got != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health after SetReady(true) = %v, want SERVING", got)
	}
	s.SetReady(false)
	if got := check(); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("health after SetReady(false) = %v, want NOT_SERVING", got)
	}
	s.SetReady(true)
	cancel()
	time.Sleep(50 * time.Millisecond)
	s.SetReady(true)
	if s.Serving() {
		t.Error("Serving() during shutdown after SetReady(true) = true, want false")
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
