package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
)

// rlsName is the gRPC service name health reports on besides the server as a
// whole ("").
const rlsName = "envoy.service.ratelimit.v3.RateLimitService"

// Options configures a Server. Addresses are host:port; port 0 picks a free
// port (see Addrs).
type Options struct {
	GRPCAddr, HTTPAddr, DebugAddr string

	// RateLimit answers ShouldRateLimit.
	RateLimit pb.RateLimitServiceServer
	// Register, when set, registers further gRPC services (the access-log sink).
	Register func(*grpc.Server)
	// JSON serves POST /json on the HTTP port.
	JSON http.Handler
	// ConfigDump returns the live descriptor configuration for /rlconfig.
	ConfigDump func() string
	// Gatherer serves /metrics on the debug port.
	Gatherer prometheus.Gatherer

	// TLS, when set, serves gRPC over TLS (mTLS when it verifies clients).
	TLS *tls.Config
	// MaxConnectionAge and its grace spread long-lived Envoy connections
	// across replicas; zero means unlimited.
	MaxConnectionAge, MaxConnectionAgeGrace time.Duration
	// Drain is how long the server keeps answering after health turns
	// NOT_SERVING; Timeout bounds the graceful stop that follows.
	Drain, Timeout time.Duration

	Logger *logrus.Entry
}

// Server owns the listeners. Create it with New, start it with Run.
type Server struct {
	o        Options
	grpc     *grpc.Server
	health   *health.Server
	http     *http.Server
	debug    *http.Server
	grpcLis  net.Listener
	httpLis  net.Listener
	debugLis net.Listener
}

// New binds the three listeners and builds the servers; nothing is served
// until Run. A bind failure closes whatever was already bound.
func New(o Options) (*Server, error) {
	if o.RateLimit == nil {
		return nil, errors.New("server: no rate-limit service")
	}
	if o.Logger == nil {
		o.Logger = logrus.NewEntry(logrus.StandardLogger())
	}
	o.Logger = o.Logger.WithField("component", "server")
	s := &Server{o: o, health: health.NewServer()}

	var err error
	if s.grpcLis, err = net.Listen("tcp", o.GRPCAddr); err != nil {
		return nil, fmt.Errorf("server: listen grpc %s: %w", o.GRPCAddr, err)
	}
	if s.httpLis, err = net.Listen("tcp", o.HTTPAddr); err != nil {
		s.closeListeners()
		return nil, fmt.Errorf("server: listen http %s: %w", o.HTTPAddr, err)
	}
	if s.debugLis, err = net.Listen("tcp", o.DebugAddr); err != nil {
		s.closeListeners()
		return nil, fmt.Errorf("server: listen debug %s: %w", o.DebugAddr, err)
	}

	var gopts []grpc.ServerOption
	if o.TLS != nil {
		gopts = append(gopts, grpc.Creds(credentials.NewTLS(o.TLS)))
	}
	ka := keepalive.ServerParameters{MaxConnectionAge: o.MaxConnectionAge, MaxConnectionAgeGrace: o.MaxConnectionAgeGrace}
	if ka.MaxConnectionAge > 0 {
		gopts = append(gopts, grpc.KeepaliveParams(ka))
	}
	s.grpc = grpc.NewServer(gopts...)
	pb.RegisterRateLimitServiceServer(s.grpc, o.RateLimit)
	healthpb.RegisterHealthServer(s.grpc, s.health)
	reflection.Register(s.grpc)
	if o.Register != nil {
		o.Register(s.grpc)
	}

	s.http = &http.Server{Handler: s.httpMux(), ReadHeaderTimeout: 5 * time.Second}
	s.debug = &http.Server{Handler: s.debugMux(), ReadHeaderTimeout: 5 * time.Second}
	return s, nil
}

// Addrs returns the bound addresses of the gRPC, HTTP and debug listeners.
func (s *Server) Addrs() (grpcAddr, httpAddr, debugAddr net.Addr) {
	return s.grpcLis.Addr(), s.httpLis.Addr(), s.debugLis.Addr()
}

// Serving reports whether health is SERVING.
func (s *Server) Serving() bool {
	resp, err := s.health.Check(context.Background(), &healthpb.HealthCheckRequest{})
	return err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING
}

func (s *Server) httpMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthcheck", func(w http.ResponseWriter, _ *http.Request) {
		if !s.Serving() {
			http.Error(w, "NOT_SERVING", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("OK"))
	})
	if s.o.JSON != nil {
		mux.Handle("/json", s.o.JSON)
	}
	return mux
}

func (s *Server) debugMux() *http.ServeMux {
	mux := http.NewServeMux()
	if s.o.Gatherer != nil {
		mux.Handle("/metrics", promhttp.HandlerFor(s.o.Gatherer, promhttp.HandlerOpts{}))
	}
	mux.HandleFunc("/rlconfig", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if s.o.ConfigDump != nil {
			_, _ = w.Write([]byte(s.o.ConfigDump()))
		}
	})
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// Run serves until ctx ends, then drains and stops (see the package
// documentation). It returns the first serving error, or nil after a clean
// shutdown. Run must be called once.
func (s *Server) Run(ctx context.Context) error {
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(rlsName, healthpb.HealthCheckResponse_SERVING)
	g, gerr := newGroup()
	g.go_(func() error { return s.grpc.Serve(s.grpcLis) })
	g.go_(func() error { return ignoreClosed(s.http.Serve(s.httpLis)) })
	g.go_(func() error { return ignoreClosed(s.debug.Serve(s.debugLis)) })
	s.o.Logger.WithFields(logrus.Fields{
		"grpc_addr": s.grpcLis.Addr().String(), "http_addr": s.httpLis.Addr().String(),
		"debug_addr": s.debugLis.Addr().String(), "tls": s.o.TLS != nil,
	}).Info("serving")

	var err error
	select {
	case <-ctx.Done():
	case err = <-gerr:
		s.o.Logger.WithError(err).Error("listener failed; shutting down")
	}
	s.shutdown()
	g.wait()
	return err
}

func (s *Server) shutdown() {
	s.health.Shutdown() // every service NOT_SERVING
	if s.o.Drain > 0 {
		s.o.Logger.WithField("drain", s.o.Drain.String()).Info("health NOT_SERVING; draining")
		time.Sleep(s.o.Drain)
	}
	stopped := make(chan struct{})
	force := time.AfterFunc(max(s.o.Timeout, time.Millisecond), func() {
		s.o.Logger.Warn("graceful stop timed out; stopping")
		s.grpc.Stop()
	})
	go func() {
		s.grpc.GracefulStop()
		close(stopped)
	}()
	<-stopped
	force.Stop()

	ctx, cancel := context.WithTimeout(context.Background(), max(s.o.Timeout, time.Millisecond))
	defer cancel()
	for _, h := range []*http.Server{s.http, s.debug} {
		if err := h.Shutdown(ctx); err != nil {
			_ = h.Close()
		}
	}
	s.o.Logger.Info("stopped")
}

func (s *Server) closeListeners() {
	for _, l := range []net.Listener{s.grpcLis, s.httpLis, s.debugLis} {
		if l != nil {
			_ = l.Close()
		}
	}
}

func ignoreClosed(err error) error {
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// group runs goroutines and reports the first error on a channel.
type group struct {
	wg   sync.WaitGroup
	errs chan error
}

func newGroup() (*group, <-chan error) {
	g := &group{errs: make(chan error, 4)}
	return g, g.errs
}

func (g *group) go_(f func() error) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		if err := f(); err != nil {
			g.errs <- err
		}
	}()
}

func (g *group) wait() { g.wg.Wait() }
