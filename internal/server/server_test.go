package server

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	rpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
)

func TestMain(m *testing.M) {
	// A handler that never returns is left running by design (see
	// TestShutdownBoundedWhateverHTTPHandlersDo).
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/dynalimit/dynalimit/internal/server.TestShutdownBoundedWhateverHTTPHandlersDo.func1"))
}

// okRLS answers OK, or blocks until release is closed when block is set.
type okRLS struct {
	pb.UnimplementedRateLimitServiceServer
	block   chan struct{}
	calls   atomic.Int64
	started chan struct{}
}

func (r *okRLS) ShouldRateLimit(ctx context.Context, _ *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	r.calls.Add(1)
	if r.block != nil {
		close(r.started)
		select {
		case <-r.block:
		case <-ctx.Done(): // a forced stop cancels in-flight calls
			return nil, ctx.Err()
		}
	}
	return &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK}, nil
}

func quietLogger() *logrus.Entry {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return logrus.NewEntry(l)
}

func start(t *testing.T, o Options) (*Server, context.CancelFunc, <-chan error) {
	t.Helper()
	o.GRPCAddr, o.HTTPAddr, o.DebugAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	o.Logger = quietLogger()
	s, err := New(o)
	if err != nil {
		t.Fatalf("New() error = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	waitServing(t, s)
	return s, cancel, done
}

func waitServing(t *testing.T, s *Server) {
	t.Helper()
	for range 200 {
		if s.Serving() {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("server never became SERVING")
}

func dial(t *testing.T, s *Server) *grpc.ClientConn {
	t.Helper()
	addr, _, _ := s.Addrs()
	cc, err := grpc.NewClient(addr.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("grpc.NewClient() error = %v", err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s error = %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestServesEveryEndpoint runs on both gRPC transports: the native one
// (the default) and grpc-go's.
func TestServesEveryEndpoint(t *testing.T) {
	for _, tr := range []string{TransportNative, TransportGRPCGo} {
		t.Run(tr, func(t *testing.T) { servesEveryEndpoint(t, tr) })
	}
}

func servesEveryEndpoint(t *testing.T, transport string) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "ratelimit_test_total", Help: "test"})
	reg.MustRegister(c)
	c.Inc()
	s, cancel, done := start(t, Options{
		RateLimit:  &okRLS{},
		JSON:       http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTooManyRequests) }),
		ConfigDump: func() string { return "domain.key: unit=MINUTE requests_per_unit=3\n" },
		Gatherer:   reg,
		Pprof:      true,
		Transport:  transport,
	})
	_, httpAddr, debugAddr := s.Addrs()
	cc := dial(t, s)

	resp, err := pb.NewRateLimitServiceClient(cc).ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "d"})
	if err != nil || resp.GetOverallCode() != pb.RateLimitResponse_OK {
		t.Fatalf("ShouldRateLimit() = %v, %v, want OK", resp, err)
	}
	for _, svc := range []string{"", rlsName} {
		h, err := healthpb.NewHealthClient(cc).Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("Health.Check(%q) = %v, %v, want SERVING", svc, h, err)
		}
	}
	if !listsService(t, cc, rlsName) {
		t.Errorf("reflection does not list %s", rlsName)
	}

	tests := []struct {
		url      string
		code     int
		contains string
	}{
		{"http://" + httpAddr.String() + "/healthcheck", 200, "OK"},
		{"http://" + httpAddr.String() + "/json", 429, ""},
		{"http://" + debugAddr.String() + "/metrics", 200, "ratelimit_test_total 1"},
		{"http://" + debugAddr.String() + "/rlconfig", 200, "requests_per_unit=3"},
		{"http://" + debugAddr.String() + "/debug/pprof/", 200, "goroutine"},
	}
	for _, tt := range tests {
		code, body := get(t, tt.url)
		if code != tt.code || !strings.Contains(body, tt.contains) {
			t.Errorf("GET %s = %d %q, want %d containing %q", tt.url, code, body, tt.code, tt.contains)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run() = %v, want nil", err)
	}
}

func TestPprofOnlyWhenAsked(t *testing.T) {
	s, cancel, done := start(t, Options{RateLimit: &okRLS{}})
	_, _, debugAddr := s.Addrs()
	if code, _ := get(t, "http://"+debugAddr.String()+"/debug/pprof/"); code != http.StatusNotFound {
		t.Errorf("GET /debug/pprof/ without Pprof = %d, want 404", code)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run() = %v, want nil", err)
	}
}

func listsService(t *testing.T, cc *grpc.ClientConn, name string) bool {
	t.Helper()
	stream, err := rpb.NewServerReflectionClient(cc).ServerReflectionInfo(context.Background())
	if err != nil {
		t.Fatalf("reflection stream: %v", err)
	}
	defer func() { _ = stream.CloseSend() }()
	if err := stream.Send(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatalf("reflection send: %v", err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatalf("reflection recv: %v", err)
	}
	for _, s := range resp.GetListServicesResponse().GetService() {
		if s.GetName() == name {
			return true
		}
	}
	return false
}

func TestShutdownDrainsWithHealthNotServing(t *testing.T) {
	s, cancel, done := start(t, Options{RateLimit: &okRLS{}, Drain: 300 * time.Millisecond, Timeout: time.Second})
	_, httpAddr, _ := s.Addrs()
	cc := dial(t, s)
	cancel()
	// During the drain: health says NOT_SERVING, yet requests are still answered.
	deadline := time.Now().Add(250 * time.Millisecond)
	for s.Serving() && time.Now().Before(deadline) {
		time.Sleep(2 * time.Millisecond)
	}
	if s.Serving() {
		t.Fatal("health still SERVING after shutdown began")
	}
	if code, _ := get(t, "http://"+httpAddr.String()+"/healthcheck"); code != http.StatusServiceUnavailable {
		t.Errorf("GET /healthcheck during drain = %d, want 503", code)
	}
	if code, _ := get(t, "http://"+httpAddr.String()+"/livez"); code != http.StatusOK {
		t.Errorf("GET /livez during drain = %d, want 200: a drain is no reason to restart", code)
	}
	if _, err := pb.NewRateLimitServiceClient(cc).ShouldRateLimit(context.Background(), &pb.RateLimitRequest{}); err != nil {
		t.Errorf("ShouldRateLimit during drain error = %v, want answered", err)
	}
	if err := <-done; err != nil {
		t.Errorf("Run() = %v, want nil", err)
	}
}

func TestShutdownForcesStopAfterTimeout(t *testing.T) {
	rls := &okRLS{block: make(chan struct{}), started: make(chan struct{})}
	s, cancel, done := start(t, Options{RateLimit: rls, Timeout: 200 * time.Millisecond})
	cc := dial(t, s)
	callErr := make(chan error, 1)
	go func() {
		_, err := pb.NewRateLimitServiceClient(cc).ShouldRateLimit(context.Background(), &pb.RateLimitRequest{})
		callErr <- err
	}()
	<-rls.started
	began := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run() = %v, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after the shutdown timeout")
	}
	if took := time.Since(began); took > 2*time.Second {
		t.Errorf("shutdown took %v, want about the 200ms timeout", took)
	}
	if err := <-callErr; err == nil {
		t.Error("in-flight call succeeded, want it cut by the forced stop")
	}
	close(rls.block)
}

// TestNewFailsOnBusyPort pins the message of each listener's bind failure:
// it names the setting that moves the listener.
func TestNewFailsOnBusyPort(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	addr := busy.Addr().String()
	free := "127.0.0.1:0"
	cases := []struct {
		name string
		o    Options
		want string
	}{
		{"grpc", Options{GRPCAddr: addr, HTTPAddr: free, DebugAddr: free},
			"server: gRPC listener " + addr + ": address already in use (is another ratelimit running? set GRPC_PORT or -grpc_port (GRPC_HOST or -grpc_host for the address) to move it)"},
		{"http", Options{GRPCAddr: free, HTTPAddr: addr, DebugAddr: free},
			"server: HTTP listener " + addr + ": address already in use (is another ratelimit running? set PORT or -port (HOST or -host for the address) to move it)"},
		{"debug", Options{GRPCAddr: free, HTTPAddr: free, DebugAddr: addr},
			"server: debug listener " + addr + ": address already in use (is another ratelimit running? set DEBUG_PORT or -debug_port (DEBUG_HOST or -debug_host for the address) to move it)"},
		{"prometheus", Options{GRPCAddr: free, HTTPAddr: free, DebugAddr: free, PrometheusAddr: addr},
			"server: Prometheus listener (USE_PROMETHEUS) " + addr + ": address already in use (is another ratelimit running? set PROMETHEUS_ADDR or -prometheus_addr to move it)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.o.RateLimit, c.o.Logger = &okRLS{}, quietLogger()
			s, err := New(c.o)
			if err == nil {
				s.closeListeners()
				t.Fatalf("New(%s on a busy port) = nil error, want %q", c.name, c.want)
			}
			if err.Error() != c.want || !errors.Is(err, syscall.EADDRINUSE) {
				t.Errorf("New(%s on a busy port) = %q, want %q wrapping EADDRINUSE", c.name, err, c.want)
			}
		})
	}
}

func TestHTTPErrorsAreLogged(t *testing.T) {
	l, hook := logtest.NewNullLogger()
	o := Options{
		RateLimit: &okRLS{},
		JSON:      http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("handler bug") }),
		Degraded:  func() string { return "config watch: lost" },
	}
	o.GRPCAddr, o.HTTPAddr, o.DebugAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	o.Logger = logrus.NewEntry(l)
	s, err := New(o)
	if err != nil {
		t.Fatalf("New() error = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	waitServing(t, s)
	_, httpAddr, _ := s.Addrs()

	if resp, err := http.Post("http://"+httpAddr.String()+"/json", "application/json", strings.NewReader("{}")); err == nil {
		_ = resp.Body.Close()
	}
	code, body := get(t, "http://"+httpAddr.String()+"/healthcheck")
	if code != http.StatusOK || !strings.Contains(body, "degraded: config watch: lost") {
		t.Errorf("GET /healthcheck = %d %q, want 200 naming the degradation", code, body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run() = %v, want nil", err)
	}
	found := false
	for _, e := range hook.AllEntries() {
		if strings.Contains(e.Message, "panic serving") && e.Data["listener"] == "http" && e.Data["component"] == "server" {
			found = true
		}
	}
	if !found {
		t.Errorf("no logrus entry for the handler panic; entries: %v", hook.AllEntries())
	}
}

func TestShutdownBoundedWhateverHTTPHandlersDo(t *testing.T) {
	started := make(chan struct{})
	var once sync.Once
	s, cancel, done := start(t, Options{
		RateLimit: &okRLS{},
		JSON: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
			once.Do(func() { close(started) })
			select {} // a handler that never returns
		}),
		Drain:   100 * time.Millisecond,
		Timeout: 200 * time.Millisecond,
	})
	_, httpAddr, _ := s.Addrs()
	go func() {
		if resp, err := http.Post("http://"+httpAddr.String()+"/json", "application/json", strings.NewReader("{}")); err == nil {
			_ = resp.Body.Close()
		}
	}()
	<-started
	began := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run() = %v, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return with an HTTP handler running")
	}
	if took := time.Since(began); took > time.Second {
		t.Errorf("shutdown took %v, want about drain + timeout (300ms)", took)
	}
}
