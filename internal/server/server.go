package server

import (
	"context"
	"crypto/tls"
	"errors"
	"log"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
)

// rlsName is the gRPC service name health reports on besides the server as a
// whole ("").
const rlsName = "envoy.service.ratelimit.v3.RateLimitService"

// Defaults of the HTTP and debug servers' timeouts.
const (
	DefaultReadHeaderTimeout = 5 * time.Second
	DefaultReadTimeout       = 10 * time.Second
	DefaultIdleTimeout       = time.Minute
)

// Options configures a Server. Addresses are host:port; port 0 picks a free
// port (see Addrs).
type Options struct {
	GRPCAddr, HTTPAddr, DebugAddr string

	// RateLimit answers ShouldRateLimit. One with GRPCServerOptions and
	// RegisterGRPC methods (a *service.Service) registers itself with its
	// options, so that it checks requests before they are decoded.
	RateLimit pb.RateLimitServiceServer
	// Services register further gRPC services on the same server and port
	// (the access-log sink).
	Services []func(grpc.ServiceRegistrar)
	// JSON serves POST /json on the HTTP port.
	JSON http.Handler
	// ConfigDump returns the live descriptor configuration for /rlconfig.
	ConfigDump func() string
	// Degraded, when set, reports a problem that does not stop the service
	// from answering (a descriptor watch that is lost): /healthcheck still
	// answers 200 while SERVING, and names the problem in its body. It
	// returns "" when there is none.
	Degraded func() string
	// Gatherer serves /metrics on the debug port.
	Gatherer prometheus.Gatherer
	// Pprof serves net/http/pprof at /debug/pprof/ on the debug port
	// (DEBUG_PPROF).
	Pprof bool
	// Admin, when set, serves the admin API at /admin/ on the debug port
	// (ADMIN_API).
	Admin http.Handler

	// GRPCUDS, when set, is a unix socket path gRPC listens on instead of
	// GRPCAddr (envoyproxy/ratelimit's GRPC_UDS).
	GRPCUDS string
	// PrometheusAddr, when set, is one more listener that serves Gatherer
	// at PrometheusPath ("/metrics" when empty): USE_PROMETHEUS.
	PrometheusAddr, PrometheusPath string
	// WaitReady keeps health NOT_SERVING from Run's start until SetReady(true)
	// (HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED).
	WaitReady bool
	// Await names further conditions health waits for (a store warming
	// up): NOT_SERVING from Run's start until Ready(name, true) for each.
	// The listeners serve meanwhile, so that clients see NOT_SERVING (and
	// /healthcheck 503 naming what is awaited) rather than a refused
	// connection.
	Await []string

	// TLS, when set, serves gRPC over TLS (mTLS when it verifies clients).
	TLS *tls.Config
	// UnaryInterceptors wrap every unary gRPC call, first to last (tracing).
	UnaryInterceptors []grpc.UnaryServerInterceptor
	// UnaryMetadata gives unary calls their request metadata on the native
	// transport: set it when an interceptor reads it (tracing).
	UnaryMetadata bool
	// Transport is the gRPC server: TransportNative (internal/grpcserver,
	// the default) or TransportGRPCGo.
	Transport string
	// InlineCalls answers calls on the connection's reader (the native
	// transport only): set it when the rate-limit service never waits,
	// on the embedded store.
	InlineCalls bool
	// Keepalive and KeepalivePolicy are grpc-go's, read by both
	// transports: MaxConnectionAge and its grace spread long-lived Envoy
	// connections across replicas (zero means unlimited); the rest keep
	// grpc-go's defaults when zero.
	Keepalive       keepalive.ServerParameters
	KeepalivePolicy keepalive.EnforcementPolicy
	// MaxConcurrentStreams bounds the calls one gRPC connection holds at
	// once; zero means DefaultMaxConcurrentStreams.
	MaxConcurrentStreams uint32

	// ReadHeaderTimeout, ReadTimeout and IdleTimeout bound how long the HTTP
	// and debug servers wait for a request's headers, for the whole
	// request, and for the next request on a kept-alive connection; zero
	// means the Default of each. MaxConnections bounds the connections
	// each of them holds open at once (further clients wait in the
	// listen backlog); zero means DefaultMaxConnections().
	ReadHeaderTimeout, ReadTimeout, IdleTimeout time.Duration
	MaxConnections                              int

	// Drain is how long the server keeps answering after health turns
	// NOT_SERVING; Timeout bounds the stop that follows, for every server
	// at once.
	Drain, Timeout time.Duration

	Logger *logrus.Entry
}

// Server owns the listeners. Create it with New, start it with Run.
type Server struct {
	o        Options
	grpc     grpcServer
	health   *health.Server
	http     *http.Server
	debug    *http.Server
	grpcLis  net.Listener
	httpLis  net.Listener
	debugLis net.Listener
	prom     *http.Server
	promLis  net.Listener
	ready    readiness
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
	if o.ReadHeaderTimeout <= 0 {
		o.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if o.ReadTimeout <= 0 {
		o.ReadTimeout = DefaultReadTimeout
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.MaxConnections <= 0 {
		o.MaxConnections = DefaultMaxConnections()
	}
	s := &Server{o: o, health: health.NewServer()}
	if o.WaitReady {
		s.ready.gate(gateConfig)
	}
	for _, name := range o.Await {
		s.ready.gate(name)
	}

	var err error
	if s.grpcLis, err = listenGRPC(o); err != nil {
		return nil, err
	}
	if s.httpLis, err = net.Listen("tcp", o.HTTPAddr); err != nil {
		s.closeListeners()
		return nil, listenError(httpListener, o.HTTPAddr, err)
	}
	if s.debugLis, err = net.Listen("tcp", o.DebugAddr); err != nil {
		s.closeListeners()
		return nil, listenError(debugListener, o.DebugAddr, err)
	}
	if o.PrometheusAddr != "" {
		if s.promLis, err = net.Listen("tcp", o.PrometheusAddr); err != nil {
			s.closeListeners()
			return nil, listenError(promListener, o.PrometheusAddr, err)
		}
	}

	s.grpc = newGRPCServer(o)
	if rls, ok := o.RateLimit.(selfRegistering); ok {
		rls.RegisterGRPC(s.grpc)
	} else {
		pb.RegisterRateLimitServiceServer(s.grpc, o.RateLimit)
	}
	for _, register := range o.Services {
		register(s.grpc)
	}
	healthpb.RegisterHealthServer(s.grpc, s.health)
	reflection.Register(s.grpc)

	s.http = s.httpServer("http", s.httpMux())
	s.debug = s.httpServer("debug", s.debugMux())
	if s.promLis != nil {
		s.prom = s.httpServer("prometheus", s.promMux())
	}
	return s, nil
}

// httpServer builds the HTTP or debug server: bounded reads, and errors
// (TLS handshakes, bad requests, handler panics) logged as JSON entries.
func (s *Server) httpServer(name string, h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: s.o.ReadHeaderTimeout,
		ReadTimeout:       s.o.ReadTimeout,
		IdleTimeout:       s.o.IdleTimeout,
		ErrorLog:          log.New(errorLog{s.o.Logger.WithField("listener", name)}, "", 0),
	}
}

// errorLog turns net/http's error log lines into logrus entries.
type errorLog struct{ log *logrus.Entry }

func (e errorLog) Write(p []byte) (int, error) {
	msg := string(p)
	if n := len(msg); n > 0 && msg[n-1] == '\n' {
		msg = msg[:n-1]
	}
	e.log.Warn(msg)
	return len(p), nil
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
			msg := "NOT_SERVING"
			if waiting := s.ready.waiting(); len(waiting) > 0 {
				msg += "\nwaiting for: " + strings.Join(waiting, ", ")
			}
			http.Error(w, msg, http.StatusServiceUnavailable)
			return
		}
		body := "OK"
		if s.o.Degraded != nil {
			if problem := s.o.Degraded(); problem != "" {
				body = "OK\ndegraded: " + problem + "\n"
			}
		}
		_, _ = w.Write([]byte(body))
	})
	// Liveness: the process answers. It depends on nothing a restart would
	// not bring back as it was (the store, the configuration, a drain), so
	// an outage of DynamoDB never restarts a healthy pod.
	mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) {
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
	if s.o.Admin != nil {
		mux.Handle("/admin/", s.o.Admin)
	}
	if s.o.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// Run serves until ctx ends or a listener fails, then drains and stops (see
// the package documentation). It returns the first serving error, or nil
// after a clean shutdown. Run must be called once.
func (s *Server) Run(ctx context.Context) error {
	s.ready.start(s.health)
	s.o.Logger.WithFields(logrus.Fields{
		"grpc_addr": s.grpcLis.Addr().String(), "http_addr": s.httpLis.Addr().String(),
		"debug_addr": s.debugLis.Addr().String(), "tls": s.o.TLS != nil,
		"max_connections": s.o.MaxConnections,
	}).Info("serving")
	err := supervise(ctx, shutdownPlan{
		drain:      s.o.Drain,
		timeout:    max(s.o.Timeout, time.Millisecond),
		notServing: s.health.Shutdown, // every service NOT_SERVING
		log:        s.o.Logger,
	}, s.units())
	s.o.Logger.Info("stopped")
	return err
}

// stopGRPC stops gRPC gracefully, and at once (cancelling in-flight calls)
// when ctx ends first.
func (s *Server) stopGRPC(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.grpc.Stop()
		<-done // GracefulStop returns once Stop has closed every connection
		return ctx.Err()
	}
}

// httpUnit serves h on lis; stopping shuts it down gracefully, and closes
// every connection when the deadline comes first. Handlers still running
// then are left to finish on their own: they hold no listener.
func httpUnit(name string, h *http.Server, lis net.Listener) unit {
	return unit{
		name: name,
		serve: func() error {
			if err := h.Serve(lis); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		},
		stop: func(ctx context.Context) error {
			err := h.Shutdown(ctx)
			if err != nil {
				_ = h.Close()
			}
			return err
		},
	}
}

func (s *Server) closeListeners() {
	for _, l := range []net.Listener{s.grpcLis, s.httpLis, s.debugLis, s.promLis} {
		if l != nil {
			_ = l.Close()
		}
	}
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
