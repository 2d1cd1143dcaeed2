package metrics

import (
	"context"
	_ "embed" // the default mapping
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	stats "github.com/lyft/gostats"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/statsd_exporter/pkg/event"
	"github.com/prometheus/statsd_exporter/pkg/exporter"
	"github.com/prometheus/statsd_exporter/pkg/mapper"
	"github.com/prometheus/statsd_exporter/pkg/registry"
	"google.golang.org/grpc"
)

var timerType = regexp.MustCompile(`(?m)^(\s*(?:-\s+)?)timer_type:`)

//go:embed compat_mapping.yaml
var defaultMapping string

// MaxCompatKeys bounds the rule keys the envoyproxy/ratelimit-compatible
// stats track (each key is up to five series). Hits of further keys are
// counted in ratelimit_compat_dropped_keys_total and not reported by key.
const MaxCompatKeys = 10000

// maxPendingTimings bounds the response times of one method sent to statsd
// at a flush: past it, the counts are scaled down to it, value by value (a
// uniform sample of the interval, not its first part). Prometheus sees
// every one.
const maxPendingTimings = 100000

// timingSlots are the response times, in whole milliseconds, counted in an
// atomic each for statsd; a larger one (rare) waits in a bounded list.
const timingSlots = 1024

// statsdShutdownWait bounds the last send to statsd at shutdown.
const statsdShutdownWait = 2 * time.Second

// CompatOptions configure Compat.
type CompatOptions struct {
	// MapperYAMLPath is a statsd-exporter mapping file (PROMETHEUS_MAPPER_YAML);
	// empty means the default mapping, which names the metrics as
	// envoyproxy/ratelimit's default mapping does.
	MapperYAMLPath string
	// ResponseTimeAsMilliseconds keeps the default mapping's response time
	// in milliseconds (PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS).
	ResponseTimeAsMilliseconds bool
	// StatsdAddr, when set (USE_STATSD), is a host:port the stats are sent
	// to under their statsd names, with ExtraTags, through the statsd sink
	// of github.com/lyft/gostats that envoyproxy/ratelimit uses: the same
	// lines on the wire, over StatsdProtocol.
	StatsdAddr string
	// StatsdProtocol is "tcp" (empty: envoyproxy/ratelimit's default) or
	// "udp" (STATSD_PROTOCOL).
	StatsdProtocol string
	// StatsdLogger receives the statsd sink's connection warnings; nil
	// discards them.
	StatsdLogger StatsdLogger
	ExtraTags    map[string]string
	// FlushInterval is how often counters are flushed (STATS_FLUSH_INTERVAL);
	// zero means 10 s.
	FlushInterval time.Duration
}

// Compat keeps envoyproxy/ratelimit's stats: the statsd names it emits
// (ratelimit.service.rate_limit.<key>.total_hits, ratelimit_server.<method>.
// total_requests, …), folded into Prometheus metrics through the statsd
// exporter's own mapper and exporter packages, so that its dashboards and a
// custom PROMETHEUS_MAPPER_YAML keep working, and optionally sent to statsd.
//
// Counters accumulate in atomics and are flushed every FlushInterval and
// before every scrape (see Gatherer); response times are observed into
// their histogram (or summary) as they come, as the exporter would have
// made it from the mapping, and kept for statsd until the next flush,
// counted per whole millisecond in atomics: a call never waits for a
// flush, and a flush does not feed the exporter one event per call. A *Compat is safe for
// concurrent use; Run owns its goroutines, except the statsd sink's
// connection goroutine, which lives as long as the process (gostats has no
// Close).
type Compat struct {
	exp      *exporter.Exporter
	events   chan event.Events
	statsd   stats.FlushableSink
	tags     string
	interval time.Duration

	keys    sync.Map // rule metric key → *compatRule
	nkeys   atomic.Int64
	dropped prometheus.Counter
	simple  sync.Map // statsd name → *atomic.Uint64

	timings sync.Map // statsd name → *timing
	// timingReg builds the response-time metrics as the exporter's own
	// registry would (same mapping, buckets, summary options), so that
	// calls observe into them directly: the exporter would take one event
	// per response time, about 1.5 µs each, in a burst at every flush. It
	// is not safe for concurrent use: timingMu guards it.
	timingReg *registry.Registry
	timingMu  sync.Mutex

	mu      sync.Mutex // guards running and the events channel
	running bool
}

// timing is one method's response-time metric: observed straight into its
// Prometheus histogram or summary, and, for statsd, counted per whole
// millisecond until the next flush.
type timing struct {
	name   string // statsd name
	once   sync.Once
	obs    prometheus.Observer // nil: dropped by the mapping, or a conflict
	scale  float64
	action string        // the exporter's events_actions_total label; "" when unmapped
	seen   atomic.Uint64 // observations since the last flush, for the exporter's own stats
	statsd bool

	slots [timingSlots]atomic.Uint64 // count per whole millisecond (statsd)
	mu    sync.Mutex
	over  []float64 // timingSlots ms and more, at most maxPendingTimings
}

func (t *timing) observe(c *Compat, ms int64) {
	t.once.Do(func() { c.resolveTiming(t) })
	t.seen.Add(1)
	if t.obs != nil {
		t.obs.Observe(float64(ms) * t.scale)
	}
	if !t.statsd {
		return
	}
	if ms >= 0 && ms < timingSlots {
		t.slots[ms].Add(1)
		return
	}
	t.mu.Lock()
	if len(t.over) < maxPendingTimings {
		t.over = append(t.over, float64(ms))
	}
	t.mu.Unlock()
}

// resolveTiming finds t's metric as the exporter would for an observer
// event named t.name (exporter.handleEvent): the mapping, its name,
// labels, help, scale and observer type, then the metric from timingReg.
func (c *Compat) resolveTiming(t *timing) {
	t.statsd = c.statsd != nil
	t.scale = 1
	m := c.exp.Mapper
	mapping, labels, present := m.GetMapping(t.name, mapper.MetricTypeObserver)
	if mapping == nil {
		mapping = &mapper.MetricMapping{}
		if m.Defaults.Ttl != 0 {
			mapping.Ttl = m.Defaults.Ttl
		}
	}
	if mapping.Action == mapper.ActionTypeDrop {
		t.action = string(mapper.ActionTypeDrop)
		return
	}
	help := "Metric autogenerated by statsd_exporter."
	if mapping.HelpText != "" {
		help = mapping.HelpText
	}
	promLabels := prometheus.Labels{}
	var name string
	if present {
		if mapping.Name == "" {
			c.exp.ErrorEventStats.WithLabelValues("empty_metric_name").Inc()
			return
		}
		name = mapper.EscapeMetricName(mapping.Name)
		for k, v := range labels {
			promLabels[k] = v
		}
		t.action = string(mapping.Action)
	} else {
		name = mapper.EscapeMetricName(t.name)
	}
	if mapping.Scale.Set {
		t.scale = mapping.Scale.Val
	}
	typ := mapping.ObserverType
	if typ == mapper.ObserverTypeDefault {
		typ = m.Defaults.ObserverType
	}
	c.timingMu.Lock()
	defer c.timingMu.Unlock()
	var err error
	if typ == mapper.ObserverTypeHistogram {
		t.obs, err = c.timingReg.GetHistogram(name, promLabels, help, mapping, c.exp.MetricsCount)
	} else {
		t.obs, err = c.timingReg.GetSummary(name, promLabels, help, mapping, c.exp.MetricsCount)
	}
	if err != nil {
		t.obs = nil
		c.exp.ConflictingEventStats.WithLabelValues("observer", name).Inc()
	}
}

// countSeen adds the observations since the last flush to the exporter's
// own statistics, as if each had been an event.
func (t *timing) countSeen(c *Compat) {
	n := t.seen.Swap(0)
	if n == 0 {
		return
	}
	switch t.action {
	case string(mapper.ActionTypeDrop):
		c.exp.EventsActions.WithLabelValues(t.action).Add(float64(n))
		return
	case "":
		c.exp.EventsUnmapped.Add(float64(n))
	default:
		c.exp.EventsActions.WithLabelValues(t.action).Add(float64(n))
	}
	if t.obs != nil {
		c.exp.EventStats.WithLabelValues("observer").Add(float64(n))
	}
}

// take empties t and calls f with each observed value and its count, the
// counts scaled down so that they add up to at most maxPendingTimings.
func (t *timing) take(f func(ms float64, n uint64)) {
	var counts [timingSlots]uint64
	total := uint64(0)
	for i := range t.slots {
		counts[i] = t.slots[i].Swap(0)
		total += counts[i]
	}
	t.mu.Lock()
	over := t.over
	t.over = nil
	t.mu.Unlock()
	total += uint64(len(over))
	scale := func(n uint64) uint64 {
		if total <= maxPendingTimings {
			return n
		}
		return n * maxPendingTimings / total
	}
	for ms, n := range counts {
		if n = scale(n); n > 0 {
			f(float64(ms), n)
		}
	}
	if k := scale(uint64(len(over))); k > 0 {
		for _, v := range over[:k] {
			f(v, 1)
		}
	}
}

type compatRule struct {
	names                             [5]string
	total, over, near, within, shadow atomic.Uint64
}

// NewCompat builds the compatible stats, registering the exporter's
// metrics with reg. A mapping file that does not load is an error.
func NewCompat(reg prometheus.Registerer, o CompatOptions) (*Compat, error) {
	m := &mapper.MetricMapper{Registerer: reg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if o.MapperYAMLPath != "" {
		b, err := os.ReadFile(o.MapperYAMLPath)
		if err != nil {
			return nil, fmt.Errorf("metrics: PROMETHEUS_MAPPER_YAML: %w", err)
		}
		// envoyproxy/ratelimit's statsd exporter (v0.26) still read
		// timer_type, which later releases renamed observer_type and refuse.
		y := timerType.ReplaceAllString(string(b), "${1}observer_type:")
		if err := m.InitFromYAMLString(y); err != nil {
			return nil, fmt.Errorf("metrics: PROMETHEUS_MAPPER_YAML %s: %w", o.MapperYAMLPath, err)
		}
	} else {
		y := defaultMapping
		if o.ResponseTimeAsMilliseconds {
			y = strings.Replace(y, "    scale: 0.001\n", "", 1)
		}
		if err := m.InitFromYAMLString(y); err != nil {
			return nil, fmt.Errorf("metrics: default statsd mapping: %w", err)
		}
	}
	c := &Compat{
		events:   make(chan event.Events),
		interval: o.FlushInterval,
		tags:     tagSuffix(o.ExtraTags),
	}
	if c.interval <= 0 {
		c.interval = 10 * time.Second
	}
	counterVec := func(name, help string, labels ...string) *prometheus.CounterVec {
		return register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels))
	}
	c.timingReg = registry.NewRegistry(reg, m)
	c.exp = exporter.NewExporter(reg, m, slog.New(slog.NewTextHandler(io.Discard, nil)),
		counterVec("statsd_exporter_events_actions_total", "The total number of StatsD events by action.", "action"),
		register(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "statsd_exporter_events_unmapped_total", Help: "The total number of StatsD events no mapping was found for."})),
		counterVec("statsd_exporter_events_error_total", "The total number of StatsD events discarded due to errors.", "reason"),
		counterVec("statsd_exporter_events_total", "The total number of StatsD events seen.", "type"),
		counterVec("statsd_exporter_events_conflict_total", "The total number of StatsD events with conflicting names.", "type"),
		register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "statsd_exporter_metrics_total", Help: "The total number of metrics."}, []string{"type"})),
	)
	c.dropped = register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ratelimit_compat_dropped_keys_total",
		Help: "Rule hits not reported in the envoyproxy/ratelimit-compatible metrics because MaxCompatKeys keys are already tracked.",
	}))
	if o.StatsdAddr != "" {
		st, err := statsdSink(o)
		if err != nil {
			return nil, err
		}
		c.statsd = st
	}
	return c, nil
}

// StatsdLogger receives the statsd sink's warnings (a *logrus.Entry is one).
type StatsdLogger interface {
	Errorf(msg string, args ...any)
	Warnf(msg string, args ...any)
}

type discardLogger struct{}

func (discardLogger) Errorf(string, ...any) {}
func (discardLogger) Warnf(string, ...any)  {}

// statsdSink returns gostats' network sink to o.StatsdAddr. The sink
// connects, and reconnects after a failure, in a goroutine of its own that
// lives as long as the process; its writes never block: what does not fit
// its 4 MiB of buffers while statsd is away is dropped.
func statsdSink(o CompatOptions) (sink stats.FlushableSink, err error) {
	host, p, err := net.SplitHostPort(o.StatsdAddr)
	if err != nil {
		return nil, fmt.Errorf("metrics: statsd address %q: %w", o.StatsdAddr, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return nil, fmt.Errorf("metrics: statsd address %q: %w", o.StatsdAddr, err)
	}
	proto := o.StatsdProtocol
	if proto == "" {
		proto = "tcp"
	}
	if proto != "tcp" && proto != "udp" {
		return nil, fmt.Errorf("metrics: statsd protocol %q: want tcp or udp", proto)
	}
	var log StatsdLogger = discardLogger{}
	if o.StatsdLogger != nil {
		log = o.StatsdLogger
	}
	// gostats reads its other settings (GOSTATS_*) from the environment and
	// panics on one it cannot parse.
	defer func() {
		if r := recover(); r != nil {
			sink, err = nil, fmt.Errorf("metrics: statsd sink: %v", r)
		}
	}()
	return stats.NewNetSink(stats.WithStatsdHost(host), stats.WithStatsdPort(port),
		stats.WithStatsdProtocol(proto), stats.WithLogger(log)), nil
}

// tagSuffix encodes tags in a stat name as envoyproxy/ratelimit's stats
// library does: ".__key=value" per tag, sorted by key.
func tagSuffix(tags map[string]string) string {
	keys := make([]string, 0, len(tags))
	for k, v := range tags {
		if k != "" && v != "" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(".__" + k + "=" + strings.NewReplacer(":", "_", "|", "_", ".", "_").Replace(tags[k]))
	}
	return b.String()
}

// sanitize replaces what envoyproxy/ratelimit replaces in a stat name.
var sanitize = strings.NewReplacer(":", "_", "|", "_")

// rule adds h to the stats of the rule whose metric key is key.
func (c *Compat) rule(key string, h RuleHits) {
	v, ok := c.keys.Load(key)
	if !ok {
		if c.nkeys.Load() >= MaxCompatKeys {
			c.dropped.Inc()
			return
		}
		prefix := "ratelimit.service.rate_limit." + sanitize.Replace(key) + "."
		r := &compatRule{names: [5]string{prefix + "total_hits", prefix + "over_limit", prefix + "near_limit", prefix + "within_limit", prefix + "shadow_mode"}}
		var loaded bool
		if v, loaded = c.keys.LoadOrStore(key, r); !loaded {
			c.nkeys.Add(1)
		}
	}
	r := v.(*compatRule)
	r.total.Add(h.Total)
	r.over.Add(h.OverLimit)
	r.near.Add(h.NearLimit)
	r.within.Add(h.WithinLimit)
	r.shadow.Add(h.ShadowMode)
}

// count adds one to the counter named name (a fixed statsd name).
func (c *Compat) count(name string) { c.counter(name).Add(1) }

// counter is the counter named name, made on first use.
func (c *Compat) counter(name string) *atomic.Uint64 {
	v, ok := c.simple.Load(name)
	if !ok {
		v, _ = c.simple.LoadOrStore(name, new(atomic.Uint64))
	}
	return v.(*atomic.Uint64)
}

// UnaryInterceptor counts every unary gRPC call and its time in whole
// milliseconds, as envoyproxy/ratelimit's server reporter does
// (ratelimit_server.<method>.total_requests and .response_time).
func (c *Compat) UnaryInterceptor() grpc.UnaryServerInterceptor {
	var names sync.Map // full method → *methodStats
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		v, ok := names.Load(info.FullMethod)
		if !ok {
			method := info.FullMethod[strings.LastIndexByte(info.FullMethod, '/')+1:]
			total := c.counter("ratelimit_server." + method + ".total_requests")
			name := "ratelimit_server." + method + ".response_time"
			t, _ := c.timings.LoadOrStore(name, &timing{name: name})
			v, _ = names.LoadOrStore(info.FullMethod, &methodStats{total: total, timing: t.(*timing)})
		}
		m := v.(*methodStats)
		m.total.Add(1)
		resp, err := handler(ctx, req)
		m.timing.observe(c, time.Since(start).Milliseconds())
		return resp, err
	}
}

// methodStats are a gRPC method's stats, named once.
type methodStats struct {
	total  *atomic.Uint64 // ratelimit_server.<method>.total_requests
	timing *timing        // ratelimit_server.<method>.response_time
}

// Run serves the exporter and flushes every FlushInterval until ctx ends,
// then flushes once more, sends what statsd has buffered (waiting at most
// statsdShutdownWait) and returns.
func (c *Compat) Run(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.exp.Listen(c.events)
	}()
	c.mu.Lock()
	c.running = true
	c.mu.Unlock()
	t := time.NewTicker(c.interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			c.Flush()
		case <-ctx.Done():
			c.Flush()
			c.mu.Lock()
			c.running = false
			close(c.events)
			c.mu.Unlock()
			<-done
			if c.statsd != nil {
				// Send what is buffered, unless statsd is away: the sink
				// would wait for a reconnection.
				sent := make(chan struct{})
				go func() { c.statsd.Flush(); close(sent) }()
				select {
				case <-sent:
				case <-time.After(statsdShutdownWait):
				}
			}
			return nil
		}
	}
}

// Flush folds what was counted since the last flush into the Prometheus
// metrics, and sends it to statsd. It returns once the exporter has applied
// it. Before Run (or after it returned) it does nothing.
func (c *Compat) Flush() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.running {
		return
	}
	var evs event.Events
	add := func(name string, n uint64) {
		if n == 0 {
			return
		}
		evs = append(evs, &event.CounterEvent{CMetricName: name, CValue: float64(n), CLabels: map[string]string{}})
		if c.statsd != nil {
			c.statsd.FlushCounter(name+c.tags, n)
		}
	}
	c.keys.Range(func(_, v any) bool {
		r := v.(*compatRule)
		for i, n := range []*atomic.Uint64{&r.total, &r.over, &r.near, &r.within, &r.shadow} {
			add(r.names[i], n.Swap(0))
		}
		return true
	})
	c.simple.Range(func(k, v any) bool {
		add(k.(string), v.(*atomic.Uint64).Swap(0))
		return true
	})
	c.timings.Range(func(_, v any) bool {
		t := v.(*timing)
		t.countSeen(c)
		if c.statsd != nil {
			t.take(func(ms float64, n uint64) {
				for range n {
					c.statsd.FlushTimer(t.name+c.tags, ms)
				}
			})
		}
		return true
	})
	if len(evs) == 0 {
		return
	}
	c.events <- evs
	c.events <- event.Events{} // received only once the batch above is applied
}

// Gatherer returns g behind a flush, so that a scrape sees every hit
// counted before it.
func (c *Compat) Gatherer(g prometheus.Gatherer) prometheus.Gatherer {
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		c.Flush()
		return g.Gather()
	})
}

// SetCompat makes m also record into c (nil stops it): rule hits, reloads,
// store errors (as envoyproxy/ratelimit's redis_error) and invalid requests
// (its service_error).
func (m *Metrics) SetCompat(c *Compat) {
	if m != nil {
		m.compat.Store(c)
	}
}

func (c *Compat) isRunning() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.running
}
