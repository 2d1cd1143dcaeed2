package main

import (
	"context"
	"crypto/tls"
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
	if tp != nil {
		defer func() {
			flush, cancel := context.WithTimeout(context.Background(), s.ShutdownTimeout)
			defer cancel()
			if err := tp.Shutdown(flush); err != nil {
				entry("tracing").WithError(err).Warn("spans not flushed")
			}
		}()
	}

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

	svc := service.New(tracing.Store(service.Instrument(b.store, m), tp), src.current,
		service.WithMetrics(m),
		service.WithLogger(entry("service")),
		service.WithShadowMode(s.ShadowMode),
		service.WithNearLimitRatio(s.NearLimitRatio),
		service.WithResponseHeaders(s.LimitResponseHeadersEnabled, s.LimitLimitHeader, s.LimitRemainingHeader, s.LimitResetHeader),
		service.WithDynamicMetadata(s.ResponseDynamicMetadata),
		service.WithExtendedMetadata(s.ResponseMetadataFormat == config.MetadataExtended),
		service.WithDescriptorHitsCharge(s.DescriptorHitsAddend == config.HitsAddendCharge),
		service.WithOnUnavailable(s.OnUnavailable == config.OnUnavailableBlock),
		service.WithHierarchy(b.hierarchy),
		service.WithRequestLimits(service.RequestLimits{
			Descriptors: s.RequestMaxDescriptors,
			Entries:     s.RequestMaxEntries,
			EntryBytes:  s.RequestMaxEntryBytes,
		}),
	)

	var await []string
	if b.warmup != nil {
		await = append(await, warmupCondition)
	}

	var tlsConfig *tls.Config
	var certs *config.CertWatcher
	if s.GRPCServerUseTLS {
		if tlsConfig, certs, err = config.ServerTLS(s, entry("tls")); err != nil {
			return err
		}
	}

	srv, err := server.New(server.Options{
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
		TLS:               tlsConfig,
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
		Logger:            entry("server"),
	})
	if err != nil {
		return err
	}

	// Background work stops when the server has stopped serving.
	bg, stopBG := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	background := func(name string, f func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(bg); err != nil && !errors.Is(err, context.Canceled) {
				entry(name).WithError(err).Error("background task stopped")
			}
		}()
	}
	background("config", src.run)
	if compat != nil {
		background("stats", compat.Run)
	}
	if s.HealthyWithAtLeastOneConfigLoaded {
		background("health", func(ctx context.Context) error {
			return followReadiness(ctx, func() int { return len(src.current().Domains()) }, srv.SetReady)
		})
	}
	if b.run != nil {
		background("store", b.run)
	}
	if b.warmup != nil {
		background("store", func(ctx context.Context) error {
			if err := b.warmup(ctx); err != nil {
				fail(err) // returned by run; stops the server
				return nil
			}
			srv.Ready(warmupCondition, true)
			return nil
		})
	}
	if certs != nil {
		background("tls", certs.Run)
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	background("sighup", func(ctx context.Context) error {
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-hup:
				entry("config").Info("SIGHUP: reloading")
				src.trigger()
			}
		}
	})

	err = srv.Run(ctx)
	stopBG()
	wg.Wait()
	if cause := context.Cause(ctx); err == nil && cause != nil && !errors.Is(cause, context.Canceled) {
		err = cause
	}
	return err
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
