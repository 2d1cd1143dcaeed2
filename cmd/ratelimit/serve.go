package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/sirupsen/logrus"

	"github.com/dynalimit/dynalimit/internal/config"
	"github.com/dynalimit/dynalimit/internal/lateness"
	"github.com/dynalimit/dynalimit/internal/metrics"
	"github.com/dynalimit/dynalimit/internal/server"
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
	p.rlqsMetrics = metrics.NewRLQS(reg)
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
	late := lateness.New(lateness.DefaultInterval, metrics.ProcessLateness(reg))
	bg.start("lateness", late.Run)

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
		settings: s, metrics: p.metrics, reg: reg, tracing: p.tracing, late: late,
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
	keys, rereadKeys, err := leaseKeys(s, len(p.config.Current().AdjustedDomains()) > 0, p.log("lease"))
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
			srv.Ready(w.warmupCondition(), true)
			if wa, ok := b.(watcher); ok {
				return wa.watch(ctx, func(ok bool) { srv.Ready(w.warmupCondition(), ok) })
			}
			return nil
		})
	}
}

// watcher is a warmer whose readiness may change after its warm-up
// (REDIS_HEALTH_CHECK_ACTIVE_CONNECTION): watch tells ready until ctx
// ends.
type watcher interface {
	watch(ctx context.Context, ready func(ok bool)) error
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
