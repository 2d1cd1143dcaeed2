package server

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
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
func (s *Server) SetReady(ok bool) { s.ready.set(ok) }

// readiness gates health on SetReady when WaitReady is set. Once Run's
// shutdown has turned health NOT_SERVING, grpc's health server ignores
// further changes, so a late SetReady cannot revive it.
type readiness struct {
	mu      sync.Mutex
	h       *health.Server
	gated   bool
	ready   bool
	started bool
}

func (r *readiness) start(h *health.Server, gated bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h, r.gated, r.started = h, gated, true
	r.apply()
}

func (r *readiness) set(ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ready = ok
	if r.started {
		r.apply()
	}
}

func (r *readiness) apply() {
	st := healthpb.HealthCheckResponse_SERVING
	if r.gated && !r.ready {
		st = healthpb.HealthCheckResponse_NOT_SERVING
	}
	r.h.SetServingStatus("", st)
	r.h.SetServingStatus(rlsName, st)
}
