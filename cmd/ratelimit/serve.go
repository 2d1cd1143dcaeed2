package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"sync"
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
// starts has ended when it returns.
func run(ctx context.Context, s config.Settings, log *logrus.Logger) error {
	entry := func(component string) *logrus.Entry { return log.WithField("component", component) }

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := metrics.New(reg)
	gatherer, compat, err := openCompat(s, m, reg, entry("statsd"))
	if err != nil {
		return err
	}

	tp, err := openTracing(ctx, s, entry("tracing"))
	if err != nil {
		return err
	}
	defer closeTracing(tp, s.ShutdownTimeout, entry("tracing"))

	src, err := openConfig(ctx, s, m, entry("config"))
	if err != nil {
		return err
	}
	defer src.stop()

	// A backend that cannot be used (its warm-up fails for good) stops
	// the service with its error.
	ctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)

	b, err := openBackend(ctx, s, m, reg, tp, entry("store"))
	if err != nil {
		return err
	}
	defer b.close()

	keys, rereadKeys, err := leaseKeys(s, entry("lease"))
	if err != nil {
		return err
	}
	adj := newAdjuster(s, b, keys, m, entry("adjust"))
	defer adj.Close()

	svc := newService(s, b, src, m, tp, adj, entry("service"))
	var certs *config.CertWatcher
	o := serverOptions(s, svc, src, gatherer, compat, tp, b.warmup != nil, entry("server"))
	o.Services = append(o.Services, accesslog.New(adj, src.current, m, entry("accesslog")).Register)
	if s.AdminAPI {
		o.Admin = admin.NewAPI(s, b.ops, src.current, log.WithFields(nil))
		entry("admin").WithField("debug_addr", o.DebugAddr).Warn("admin API enabled at /admin/ on the debug listener, without authentication: keep that listener private")
	}
	if s.GRPCServerUseTLS {
		if o.TLS, certs, err = config.ServerTLS(s, entry("tls")); err != nil {
			return err
		}
	}
	srv, err := server.New(o)
	if err != nil {
		return err
	}

	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	// Background work stops when the server has stopped serving.
	bg := newTasks(entry)
	bg.start("config", src.run)
	bg.start("sighup", reloadOnHangup(hup, src.trigger, entry("config")))
	if compat != nil {
		bg.start("stats", compat.Run)
	}
	if s.HealthyWithAtLeastOneConfigLoaded {
		bg.start("health", func(ctx context.Context) error {
			return followReadiness(ctx, func() int { return len(src.current().Domains()) }, srv.SetReady)
		})
	}
	startBackend(bg, b, src, srv, fail)
	if certs != nil {
		bg.start("tls", certs.Run)
	}
	if rereadKeys != nil {
		bg.start("lease-keys", rereadKeys)
	}

	err = srv.Run(ctx)
	bg.stop()
	if cause := context.Cause(ctx); err == nil && cause != nil && !errors.Is(cause, context.Canceled) {
		err = cause
	}
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

// newService is the rate-limit service over backend b and the live
// configuration of src, as s configures it.
func newService(s config.Settings, b backend, src configSource, m *metrics.Metrics, tp *tracing.Provider, adj *adjust.Adjuster, log *logrus.Entry) *service.Service {
	return service.New(tracing.Store(service.Instrument(b.store, m), tp), src.current,
		service.WithMetrics(m),
		service.WithLogger(log),
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
		service.WithHierarchy(b.hierarchy),
		service.WithNamespaceGate(b.gate),
		service.WithAdjuster(adj),
		service.WithRequestLimits(service.RequestLimits{
			Descriptors: s.RequestMaxDescriptors,
			Entries:     s.RequestMaxEntries,
			EntryBytes:  s.RequestMaxEntryBytes,
		}),
	)
}

// serverOptions are the listeners and servers of svc as s configures them,
// without TLS; health awaits the backend's warm-up when warms.
func serverOptions(s config.Settings, svc *service.Service, src configSource, gatherer prometheus.Gatherer, compat *metrics.Compat, tp *tracing.Provider, warms bool, log *logrus.Entry) server.Options {
	var await []string
	if warms {
		await = append(await, warmupCondition)
	}
	return server.Options{
		GRPCAddr:          hostPort(s.GRPCHost, s.GRPCPort),
		HTTPAddr:          hostPort(s.Host, s.Port),
		DebugAddr:         hostPort(s.DebugHost, s.DebugPort),
		Pprof:             s.DebugPprof,
		RateLimit:         svc,
		JSON:              svcJSON{svc},
		ConfigDump:        src.dump,
		Degraded:          src.degraded,
		Gatherer:          gatherer,
		GRPCUDS:           s.GRPCUDS,
		PrometheusAddr:    prometheusAddr(s),
		PrometheusPath:    s.PrometheusPath,
		WaitReady:         s.HealthyWithAtLeastOneConfigLoaded,
		Await:             await,
		UnaryInterceptors: append(interceptors(tp), compatInterceptors(compat)...),
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
		UnaryMetadata:        tp != nil, // the trace context
		// The embedded store never waits: its calls are answered where
		// they are read.
		InlineCalls:       s.BackendType == config.BackendMemory,
		ReadHeaderTimeout: s.HTTPReadHeaderTimeout,
		ReadTimeout:       s.HTTPReadTimeout,
		IdleTimeout:       s.HTTPIdleTimeout,
		MaxConnections:    s.HTTPMaxConnections,
		Drain:             s.ShutdownDrain,
		Timeout:           s.ShutdownTimeout,
		Logger:            log,
	}
}

// tasks is run's background work: each task runs on its own goroutine
// with a context that ends at stop, which waits for every task to return.
// A task's error, other than its context's end, is logged under its name.
type tasks struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	log    func(component string) *logrus.Entry
}

func newTasks(log func(component string) *logrus.Entry) *tasks {
	ctx, cancel := context.WithCancel(context.Background())
	return &tasks{ctx: ctx, cancel: cancel, log: log}
}

func (t *tasks) start(name string, f func(context.Context) error) {
	t.wg.Go(func() {
		if err := f(t.ctx); err != nil && !errors.Is(err, context.Canceled) {
			t.log(name).WithError(err).Error("background task stopped")
		}
	})
}

func (t *tasks) stop() {
	t.cancel()
	t.wg.Wait()
}

// startBackend starts the backend's own work, its watch of the namespace
// registry (for the namespaces src's rules name) and its warm-up: a
// warm-up that fails for good fails run (fail), one that succeeds meets
// health's warm-up condition.
func startBackend(bg *tasks, b backend, src configSource, srv *server.Server, fail context.CancelCauseFunc) {
	if b.run != nil {
		bg.start("store", b.run)
	}
	if b.watch != nil {
		bg.start("namespaces", func(ctx context.Context) error {
			return b.watch(ctx, func() []string { return configNamespaces(src.current()) })
		})
	}
	if b.warmup != nil {
		bg.start("store", func(ctx context.Context) error {
			if err := b.warmup(ctx); err != nil {
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
