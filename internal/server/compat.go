package server

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"syscall"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// listenGRPC binds gRPC on the unix socket GRPCUDS when set, replacing a
// stale socket file left by a process that did not remove it, else on TCP
// GRPCAddr. A path holding anything but a socket is left alone and is an
// error.
func listenGRPC(o Options) (net.Listener, error) {
	if o.GRPCUDS == "" {
		l, err := net.Listen("tcp", o.GRPCAddr)
		if err != nil {
			return nil, listenError(grpcListener, o.GRPCAddr, err)
		}
		return l, nil
	}
	if fi, err := os.Lstat(o.GRPCUDS); err == nil {
		if fi.Mode()&fs.ModeSocket == 0 {
			return nil, fmt.Errorf("server: listen grpc unix %s: exists and is not a socket", o.GRPCUDS)
		}
		if c, err := net.Dial("unix", o.GRPCUDS); err == nil {
			_ = c.Close()
			return nil, listenError(udsListener, o.GRPCUDS, syscall.EADDRINUSE)
		}
		if err := os.Remove(o.GRPCUDS); err != nil {
			return nil, fmt.Errorf("server: listen grpc unix %s: remove stale socket: %w", o.GRPCUDS, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("server: listen grpc unix %s: %w", o.GRPCUDS, err)
	}
	l, err := net.Listen("unix", o.GRPCUDS)
	if err != nil {
		return nil, listenError(udsListener, o.GRPCUDS, err)
	}
	return l, nil // the listener removes the socket file when closed
}

// PrometheusAddr returns the bound address of the USE_PROMETHEUS listener,
// nil when there is none.
func (s *Server) PrometheusAddr() net.Addr {
	if s.promLis == nil {
		return nil
	}
	return s.promLis.Addr()
}

func (s *Server) promMux() *http.ServeMux {
	path := s.o.PrometheusPath
	if path == "" {
		path = "/metrics"
	}
	mux := http.NewServeMux()
	if s.o.Gatherer != nil {
		mux.Handle(path, promhttp.HandlerFor(s.o.Gatherer, promhttp.HandlerOpts{}))
	}
	return mux
}

// units are the servers Run supervises.
func (s *Server) units() []unit {
	us := []unit{
		{name: "grpc", serve: func() error { return s.grpc.Serve(s.grpcLis) }, stop: s.stopGRPC},
		httpUnit("http", s.http, limitListener(s.httpLis, s.o.MaxConnections)),
		httpUnit("debug", s.debug, limitListener(s.debugLis, s.o.MaxConnections)),
	}
	if s.prom != nil {
		us = append(us, httpUnit("prometheus", s.prom, limitListener(s.promLis, s.o.MaxConnections)))
	}
	return us
}

// SetReady reports whether the service has what WaitReady waits for (a
// configuration with at least one domain). Health follows it while Run
// serves; before Run it sets where health starts. Without WaitReady it does
// nothing. Safe for concurrent use.
func (s *Server) SetReady(ok bool) { s.ready.set(gateConfig, ok) }

// Ready reports that the condition name of Options.Await is met (ok) or not.
// Health is SERVING while every awaited condition is met (and WaitReady's,
// when set). A name Await does not list is ignored. Safe for concurrent use.
func (s *Server) Ready(name string, ok bool) { s.ready.set(name, ok) }

// gateConfig is WaitReady's condition.
const gateConfig = "configuration loaded"

// readiness gates health on conditions: WaitReady's and Options.Await's.
// Once Run's shutdown has turned health NOT_SERVING, grpc's health server
// ignores further changes, so a late Ready cannot revive it.
type readiness struct {
	mu      sync.Mutex
	h       *health.Server
	met     map[string]bool // every gated condition, met or not
	started bool
}

// gate adds a condition health waits for, unmet; before start only.
func (r *readiness) gate(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.met == nil {
		r.met = map[string]bool{}
	}
	if _, ok := r.met[name]; !ok {
		r.met[name] = false
	}
}

func (r *readiness) start(h *health.Server) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h, r.started = h, true
	r.apply()
}

func (r *readiness) set(name string, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, gated := r.met[name]; !gated {
		return
	}
	r.met[name] = ok
	if r.started {
		r.apply()
	}
}

// waiting returns the conditions not met yet, sorted.
func (r *readiness) waiting() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var names []string
	for name, ok := range r.met {
		if !ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

func (r *readiness) apply() {
	st := healthpb.HealthCheckResponse_SERVING
	for _, ok := range r.met {
		if !ok {
			st = healthpb.HealthCheckResponse_NOT_SERVING
		}
	}
	r.h.SetServingStatus("", st)
	r.h.SetServingStatus(rlsName, st)
}
