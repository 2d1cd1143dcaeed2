package server

import (
	"context"
	"strings"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

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

// TestAwait: each awaited condition holds health NOT_SERVING, and
// /healthcheck at 503 naming it, until it is reported ready; WaitReady's
// condition and Await's hold it together.
func TestAwait(t *testing.T) {
	o := Options{RateLimit: &okRLS{}, WaitReady: true, Await: []string{"store warm-up"}, Drain: time.Millisecond,
		GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", DebugAddr: "127.0.0.1:0", Logger: quietLogger()}
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	cc := dial(t, s)
	_, httpAddr, _ := s.Addrs()
	steps := []struct {
		name       string
		ready      func()
		want       healthpb.HealthCheckResponse_ServingStatus
		code       int
		bodyPrefix string
	}{
		{"at start", func() {}, healthpb.HealthCheckResponse_NOT_SERVING, 503, "NOT_SERVING\nwaiting for: configuration loaded, store warm-up"},
		{"an unknown name", func() { s.Ready("other", true) }, healthpb.HealthCheckResponse_NOT_SERVING, 503, "NOT_SERVING\nwaiting for: configuration loaded, store warm-up"},
		{"store ready", func() { s.Ready("store warm-up", true) }, healthpb.HealthCheckResponse_NOT_SERVING, 503, "NOT_SERVING\nwaiting for: configuration loaded\n"},
		{"config ready too", func() { s.SetReady(true) }, healthpb.HealthCheckResponse_SERVING, 200, "OK"},
		{"store not ready again", func() { s.Ready("store warm-up", false) }, healthpb.HealthCheckResponse_NOT_SERVING, 503, "NOT_SERVING\nwaiting for: store warm-up\n"},
		{"store ready again", func() { s.Ready("store warm-up", true) }, healthpb.HealthCheckResponse_SERVING, 200, "OK"},
	}
	for _, st := range steps {
		st.ready()
		r, err := healthpb.NewHealthClient(cc).Check(context.Background(), &healthpb.HealthCheckRequest{Service: rlsName})
		if err != nil {
			t.Fatalf("%s: Check: %v", st.name, err)
		}
		if r.GetStatus() != st.want {
			t.Errorf("%s: Check(%s) = %v, want %v", st.name, rlsName, r.GetStatus(), st.want)
		}
		code, body := get(t, "http://"+httpAddr.String()+"/healthcheck")
		if code != st.code || !strings.HasPrefix(body, st.bodyPrefix) {
			t.Errorf("%s: GET /healthcheck = %d %q, want %d %q", st.name, code, body, st.code, st.bodyPrefix)
		}
		// Liveness is the process's alone: the store warming up or not
		// ready again never fails it.
		if code, body := get(t, "http://"+httpAddr.String()+"/livez"); code != 200 || body != "OK" {
			t.Errorf("%s: GET /livez = %d %q, want 200 OK", st.name, code, body)
		}
	}
}
