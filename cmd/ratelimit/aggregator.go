package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/sirupsen/logrus"

	"github.com/dynalimit/dynalimit/internal/admin"
	"github.com/dynalimit/dynalimit/internal/config"
	"github.com/dynalimit/dynalimit/internal/metrics"
	"github.com/dynalimit/dynalimit/internal/streampoll"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/usage"
)

// runAggregator runs `ratelimit aggregator`: the stream poller.
func runAggregator(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	s, err := loadSettings("aggregator", args, getenv, nil)
	if err != nil {
		return reportSettingsError(stdout, stderr, err, printAggregatorHelp)
	}
	log, err := newLogger(s, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "ratelimit aggregator: %v\n", err)
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := aggregate(ctx, s, log.WithField("component", "aggregator")); err != nil && ctx.Err() == nil {
		log.WithError(err).Error("ratelimit aggregator stopped with an error")
		return exitFailure
	}
	// Stopped by SIGTERM or SIGINT, whatever it was doing.
	log.WithField("component", "aggregator").Info("aggregator stopped")
	return exitOK
}

// aggregate polls the table's stream into usage snapshots until ctx ends,
// serving /metrics on the debug listener.
func aggregate(ctx context.Context, s config.Settings, log *logrus.Entry) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// The debug listener first: a port in use is said before DynamoDB is
	// called.
	stopDebug, err := serveMetrics(s, reg, log)
	if err != nil {
		return err
	}
	defer stopDebug()
	client, err := dynamo.NewClient(ctx, s.DynamoDBEndpoint, s.AWSRegion, metrics.DynamoDB(reg))
	if err != nil {
		return fmt.Errorf("dynamodb client: %w", err)
	}
	st, err := dynamo.NewStore(ctx, client, s.DynamoConfig(), dynamo.WithLogger(log))
	if err != nil {
		return admin.Explain(err, s)
	}
	defer st.Close()
	hist := usage.Of(st)
	arn, err := hist.StreamARN(ctx)
	if err != nil {
		return admin.Explain(err, s)
	}
	agg := usage.NewAggregator(hist, usage.WithObserver(metrics.AggregatorObserver(reg)))
	p := streampoll.New(usage.NewStreamsClient(client), hist, agg, streampoll.Config{
		StreamARN: arn, Log: log, Observer: metrics.PollerObserver(reg),
	})
	log.WithFields(logrus.Fields{"table": s.DynamoDBTable, "stream": arn, "owner": p.Owner()}).Info("aggregator: polling the table's stream")
	return p.Run(ctx)
}

// serveMetrics serves /metrics on DEBUG_HOST:DEBUG_PORT until the returned
// function is called; when it returns, the server's goroutine has ended.
func serveMetrics(s config.Settings, reg *prometheus.Registry, log *logrus.Entry) (func(), error) {
	addr := net.JoinHostPort(s.DebugHost, strconv.Itoa(s.DebugPort))
	ln, err := net.Listen("tcp", addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("debug listener %s: address already in use (is a ratelimit serve running here? set DEBUG_PORT or -debug_port to move it)", addr)
	}
	if err != nil {
		return nil, fmt.Errorf("debug listener %s: %w (check DEBUG_HOST and DEBUG_PORT)", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "OK\n") })
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan struct{})
	go func() {
		defer close(served)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.WithError(err).Error("aggregator: debug listener failed")
		}
	}()
	log.WithField("addr", ln.Addr().String()).Info("aggregator: /metrics on the debug listener")
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-served
	}, nil
}

func printAggregatorHelp(w io.Writer) {
	fmt.Fprint(w, `Usage: ratelimit aggregator [flags]

Reads the DynamoDB table's stream and writes usage snapshots (hourly, daily
and monthly, per entity, resource and limit), until SIGTERM or SIGINT: the
stream poller, for where the Lambda (cmd/aggregator-lambda) does not run
(docker compose, Kubernetes, DynamoDB Local). One poller of a table reads at
a time (a lease in the table); run two for availability. Its place in each
stream shard is checkpointed in the table, so a restart resumes where it
stopped, and a record read twice is counted once. /metrics is served on
DEBUG_HOST:DEBUG_PORT: beside a ratelimit serve on the same host, give it
a DEBUG_PORT of its own (serve's default is 6070).

It reads the same settings as serve (DYNAMODB_TABLE, DYNAMODB_ENDPOINT,
AWS_REGION, NAMESPACE, LOG_LEVEL, LOG_FORMAT, DEBUG_HOST, DEBUG_PORT); a flag
named as the variable in lower case overrides it.

Example:
  DYNAMODB_ENDPOINT=http://localhost:8000 DEBUG_PORT=6071 ratelimit aggregator
`)
}
