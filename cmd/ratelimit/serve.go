package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/dynalimit/dynalimit/internal/accesslog"
	"github.com/dynalimit/dynalimit/internal/adjust"
	"github.com/dynalimit/dynalimit/internal/admin"
	"github.com/dynalimit/dynalimit/internal/config"
	"github.com/dynalimit/dynalimit/internal/metrics"
	"github.com/dynalimit/dynalimit/internal/server"
	"github.com/dynalimit/dynalimit/internal/service"
	"github.com/dynalimit/dynalimit/internal/tracing"
)

// serve runs the service with settings s until SIGTERM or SIGINT (or ctx
// ends).
func serve(ctx context.Context, s config.Settings, stderr io.Writer) int {
	log, err := newLogger(s, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "ratelimit: %v\n", err)
		return 2
	}
	warnLegacy(log, legacyIgnored, legacyArgs)
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, s, log); err != nil {
		if !logLoadFailure(log, s, err) {
			log.WithError(err).Error("ratelimit stopped with an error")
		}
		return 1
	}
	return 0
}

// run wires the components and serves until ctx ends. Every goroutine it
// starts has ended when it returns, and before the backend closes.
func run(ctx context.Context, s config.Settings, log *logrus.Logger) error {
	p := parts{settings: s, log: func(component string) *logrus.Entry { return log.WithField("component", component) }}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	p.metrics = metrics.New(reg)
	var err error
	if p.gatherer, p.compat, err = openCompat(s, p.metrics, reg, p.log("statsd")); err != nil {
		return err
	}
	if p.tracing, err = openTracing(ctx, s, p.log("tracing")); err != nil {
		return err
	}
	defer closeTracing(p.tracing, s.ShutdownTimeout, p.log("tracing"))

	// The one group of background work: it stops when the server has
	// stopped serving (or when run fails before serving).
	bg := newTasks(context.Background(), p.log)
	defer bg.stop()

	if p.config, err = openConfig(s, p.metrics, p.log("config")); err != nil {
		return err
	}
	bg.start("config", p.config.Run)
	if err := p.config.Ready(ctx); err != nil {
		return err
	}

	// A backend that cannot be used (its warm-up fails for good) stops
	// the service with its error.
	ctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)

	p.backend, err = openBackend(ctx, backendOptions{
		settings: s, metrics: p.metrics, reg: reg, tracing: p.tracing,
		names: func() []string { return configNamespaces(p.config.Current()) },
		log:   p.log("store"),
	})
	if err != nil {
		return err
	}
	defer closeBackend(bg, p.backend, p.log("store"))

	if err := serveParts(ctx, p, bg, fail); err != nil {
		return err
	}
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return nil
}

// closeBackend closes b once every task of bg has returned.
func closeBackend(bg *tasks, b backend, log *logrus.Entry) {
	bg.stop()
	if err := b.Close(); err != nil {
		log.WithError(err).Warn("store not closed cleanly")
	}
}

// serveParts serves the service over p until ctx ends, with its background
// work in bg, and stops bg once the server has stopped serving. A backend
// that cannot be used calls fail.
func serveParts(ctx context.Context, p parts, bg *tasks, fail context.CancelCauseFunc) error {
	s := p.settings
	keys, rereadKeys, err := leaseKeys(s, p.log("lease"))
	if err != nil {
		return err
	}
	p.adjuster = newAdjuster(s, p.backend.Settler(), keys, p.metrics, p.log("adjust"))
	defer p.adjuster.Close()

	srv, certs, err := newServer(p)
	if err != nil {
		return err
	}

	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	bg.start("sighup", reloadOnHangup(hup, p.config.Trigger, p.log("config")))
	if p.compat != nil {
		bg.start("stats", p.compat.Run)
	}
	if s.HealthyWithAtLeastOneConfigLoaded {
		bg.start("health", func(ctx context.Context) error {
			return followReadiness(ctx, func() int { return len(p.config.Current().Domains()) }, srv.SetReady)
		})
	}
	startBackend(bg, p.backend, srv, fail)
	if certs != nil {
		bg.start("tls", certs.Run)
	}
	if rereadKeys != nil {
		bg.start("lease-keys", rereadKeys)
	}

	err = srv.Run(ctx)
	bg.stop()
	return err
}

// closeTracing flushes the spans still batched, within timeout.
func closeTracing(tp *tracing.Provider, timeout time.Duration, log *logrus.Entry) {
	if tp == nil {
		return
	}
	flush, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := tp.Shutdown(flush); err != nil {
		log.WithError(err).Warn("spans not flushed")
	}
}

// parts are what the service and its server are built from.
type parts struct {
	settings config.Settings
	backend  backend
	config   configSource
	metrics  *metrics.Metrics
	gatherer prometheus.Gatherer
	compat   *metrics.Compat // nil without USE_STATSD
	tracing  *tracing.Provider
	adjuster *adjust.Adjuster
	log      func(component string) *logrus.Entry
}

// newServer is the service over p's backend and configuration, served on
// the listeners p's settings configure, with its access log, the admin API
// when ADMIN_API, and TLS when GRPC_SERVER_USE_TLS, whose certificates
// certs rereads (nil without TLS).
func newServer(p parts) (srv *server.Server, certs *config.CertWatcher, err error) {
	s := p.settings
	svc := newService(p)
	o := serverOptions(p, svc)
	o.Services = append(o.Services, accesslog.New(p.adjuster, p.config.Current, p.metrics, p.log("accesslog")).Register)
	if s.AdminAPI {
		o.Admin = admin.NewAPI(s, embeddedStore(p.backend), p.config.Current, p.log("admin"))
		p.log("admin").WithField("debug_addr", o.DebugAddr).Warn("admin API enabled at /admin/ on the debug listener, without authentication: keep that listener private")
	}
	if s.GRPCServerUseTLS {
		if o.TLS, certs, err = config.ServerTLS(s, p.log("tls")); err != nil {
			return nil, nil, err
		}
	}
	if srv, err = server.New(o); err != nil {
		return nil, nil, err
	}
	return srv, certs, nil
}

// newService is the rate-limit service over p's backend and the live
// configuration of p's source, as p's settings configure it.
func newService(p parts) *service.Service {
	s, b := p.settings, p.backend
	return service.New(tracing.Store(service.Instrument(b.Store(), p.metrics), p.tracing), p.config.Current,
		service.WithMetrics(p.metrics),
		service.WithLogger(p.log("service")),
		service.WithShadowMode(s.ShadowMode),
		service.WithNearLimitRatio(s.NearLimitRatio),
		service.WithResponseHeaders(s.LimitResponseHeadersEnabled, s.LimitLimitHeader, s.LimitRemainingHeader, s.LimitResetHeader),
		service.WithDynamicMetadata(s.ResponseDynamicMetadata),
		service.WithExtendedMetadata(s.ResponseMetadataFormat == config.MetadataExtended),
		service.WithDescriptorHitsCharge(s.DescriptorHitsAddend == config.HitsAddendCharge),
		// Under local the DynamoDB store decides what it cannot on the
		// replica's share: what still fails is refused. The embedded store
		// does not fail, and keeps allow.
		service.WithOnUnavailable(s.OnUnavailable == config.OnUnavailableBlock ||
			(s.OnUnavailable == config.OnUnavailableLocal && s.BackendType == config.BackendDynamoDB)),
		service.WithHierarchy(b.Hierarchy()),
		service.WithNamespaceGate(b.Gate()),
		service.WithAdjuster(p.adjuster),
		service.WithRequestLimits(service.RequestLimits{
			Descriptors: s.RequestMaxDescriptors,
			Entries:     s.RequestMaxEntries,
			EntryBytes:  s.RequestMaxEntryBytes,
		}),
	)
}

// serverOptions are the listeners and servers of svc as p's settings
// configure them, without TLS; health awaits the backend's warm-up when it
// has one.
func serverOptions(p parts, svc *service.Service) server.Options {
	s := p.settings
	var await []string
	if _, ok := p.backend.(warmer); ok {
		await = append(await, warmupCondition)
	}
	return server.Options{
		GRPCAddr:          hostPort(s.GRPCHost, s.GRPCPort),
		HTTPAddr:          hostPort(s.Host, s.Port),
		DebugAddr:         hostPort(s.DebugHost, s.DebugPort),
		Pprof:             s.DebugPprof,
		RateLimit:         svc,
		JSON:              svcJSON{svc},
		ConfigDump:        configDump(p.config, s.Namespace),
		Degraded:          p.config.WatchProblem,
		Gatherer:          p.gatherer,
		GRPCUDS:           s.GRPCUDS,
		PrometheusAddr:    prometheusAddr(s),
		PrometheusPath:    s.PrometheusPath,
		WaitReady:         s.HealthyWithAtLeastOneConfigLoaded,
		Await:             await,
		UnaryInterceptors: append(interceptors(p.tracing), compatInterceptors(p.compat)...),
		Keepalive: keepalive.ServerParameters{
			MaxConnectionIdle:     s.GRPCMaxConnectionIdle,
			MaxConnectionAge:      s.GRPCMaxConnectionAge,
			MaxConnectionAgeGrace: s.GRPCMaxConnectionAgeGrace,
			Time:                  s.GRPCKeepaliveTime,
			Timeout:               s.GRPCKeepaliveTimeout,
		},
		KeepalivePolicy: keepalive.EnforcementPolicy{
			MinTime:             s.GRPCKeepaliveMinTime,
			PermitWithoutStream: s.GRPCKeepalivePermitWithoutStream,
		},
		MaxConcurrentStreams: uint32(s.GRPCMaxConcurrentStreams),
		Transport:            s.GRPCTransport,
		UnaryMetadata:        p.tracing != nil, // the trace context
		// The embedded store never waits: its calls are answered where
		// they are read.
		InlineCalls:       s.BackendType == config.BackendMemory,
		ReadHeaderTimeout: s.HTTPReadHeaderTimeout,
		ReadTimeout:       s.HTTPReadTimeout,
		IdleTimeout:       s.HTTPIdleTimeout,
		MaxConnections:    s.HTTPMaxConnections,
		Drain:             s.ShutdownDrain,
		Timeout:           s.ShutdownTimeout,
		Logger:            p.log("server"),
	}
}

// svcJSON adapts the service's JSON endpoint to an http.Handler.
type svcJSON struct{ s *service.Service }

func (h svcJSON) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.s.ServeJSON(w, r) }

// startBackend starts the backend's work and its warm-up, if it warms up:
// a warm-up that fails for good fails run (fail), one that succeeds meets
// health's warm-up condition.
func startBackend(bg *tasks, b backend, srv *server.Server, fail context.CancelCauseFunc) {
	bg.start("store", b.Run)
	if w, ok := b.(warmer); ok {
		bg.start("warm-up", func(ctx context.Context) error {
			if err := w.Warmup(ctx); err != nil {
				fail(err) // returned by run; stops the server
				return nil
			}
			srv.Ready(warmupCondition, true)
			return nil
		})
	}
}

// reloadOnHangup is a task that calls trigger on each signal from hup.
func reloadOnHangup(hup <-chan os.Signal, trigger func(), log *logrus.Entry) func(context.Context) error {
	return func(ctx context.Context) error {
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-hup:
				log.Info("SIGHUP: reloading")
				trigger()
			}
		}
	}
}

// interceptors returns the gRPC interceptors tracing asks for.
func interceptors(tp *tracing.Provider) []grpc.UnaryServerInterceptor {
	if tp == nil {
		return nil
	}
	return []grpc.UnaryServerInterceptor{tp.UnaryServerInterceptor()}
}

func hostPort(host string, port int) string {
	return host + ":" + strconv.Itoa(port)
}

func newLogger(s config.Settings, out io.Writer) (*logrus.Logger, error) {
	l := logrus.New()
	l.SetOutput(out)
	level, err := logrus.ParseLevel(s.LogLevel)
	if err != nil {
		return nil, fmt.Errorf("LOG_LEVEL: %w", err)
	}
	l.SetLevel(level)
	if s.LogFormat == config.LogFormatJSON {
		l.SetFormatter(&logrus.JSONFormatter{TimestampFormat: time.RFC3339Nano})
	} else {
		l.SetFormatter(&logrus.TextFormatter{FullTimestamp: true})
	}
	return l, nil
}
