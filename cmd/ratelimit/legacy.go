package main

import (
	"context"
	"flag"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"

	"github.com/dynalimit/dynalimit/internal/config"
	"github.com/dynalimit/dynalimit/internal/metrics"
)

// dropForeignFlags removes arguments of the form --name=value (or -name=value)
// whose name fs does not define, as envoyproxy/ratelimit ignores every
// argument (Envoy Gateway passes --quotaRateLimitServiceAddr=…). It returns
// the kept arguments and the dropped ones.
func dropForeignFlags(fs *flag.FlagSet, args []string) (kept, dropped []string) {
	for _, a := range args {
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") && hasValue && fs.Lookup(name) == nil {
			dropped = append(dropped, a)
			continue
		}
		kept = append(kept, a)
	}
	return kept, dropped
}

// openCompat builds envoyproxy/ratelimit's stats unless DISABLE_STATS, and
// makes m record into them. The returned gatherer flushes them before each
// scrape; run (nil when disabled) owns their goroutines.
func openCompat(s config.Settings, m *metrics.Metrics, reg *prometheus.Registry, log *logrus.Entry) (prometheus.Gatherer, *metrics.Compat, error) {
	if s.DisableStats {
		return reg, nil, nil
	}
	o := metrics.CompatOptions{
		MapperYAMLPath:             s.PrometheusMapperYAML,
		ResponseTimeAsMilliseconds: s.PrometheusResponseTimeAsMilliseconds,
		ExtraTags:                  s.ExtraTagMap(),
		FlushInterval:              s.StatsFlushInterval,
	}
	if s.UseStatsd {
		o.StatsdAddr = net.JoinHostPort(s.StatsdHost, strconv.Itoa(s.StatsdPort))
		o.StatsdProtocol = s.StatsdProtocol
		o.StatsdLogger = log
	}
	c, err := metrics.NewCompat(reg, o)
	if err != nil {
		return nil, nil, err
	}
	m.SetCompat(c)
	return c.Gatherer(reg), c, nil
}

// followReadiness sets ready from whether the live configuration has a
// domain (HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED), until ctx ends.
func followReadiness(ctx context.Context, domains func() int, setReady func(bool)) error {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		setReady(domains() > 0)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// warnLegacy logs, once, the envoyproxy/ratelimit settings and arguments
// that are accepted but not used.
func warnLegacy(log *logrus.Logger, ignored, args []string) {
	if len(ignored) > 0 {
		log.WithField("component", "config").WithField("settings", ignored).
			Warn("envoyproxy/ratelimit settings for parts this service does not have are ignored")
	}
	if len(args) > 0 {
		log.WithField("component", "config").WithField("arguments", args).
			Warn("command-line arguments of envoyproxy/ratelimit's form that this service does not read are ignored")
	}
}

func compatInterceptors(c *metrics.Compat) []grpc.UnaryServerInterceptor {
	if c == nil {
		return nil
	}
	return []grpc.UnaryServerInterceptor{c.UnaryInterceptor()}
}

func prometheusAddr(s config.Settings) string {
	if !s.UsePrometheus {
		return ""
	}
	return s.PrometheusAddr
}
