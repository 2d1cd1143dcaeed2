package metrics

import (
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Label values of ratelimit_decisions_total's code label: Envoy's codes.
const (
	CodeOK        = "OK"
	CodeOverLimit = "OVER_LIMIT"
)

// UnknownDomain is the domain label of decisions for domains that the loaded
// configuration does not hold, so that request text never becomes a label.
const UnknownDomain = "unknown"

// StoreOutcome is the outcome label of a store call.
type StoreOutcome int

// Store call outcomes.
const (
	// StoreAdmitted: the store decided and admitted the plan.
	StoreAdmitted StoreOutcome = iota
	// StoreRefused: the store decided and refused the plan.
	StoreRefused
	// StoreError: the store could not decide (unavailable, timed out).
	StoreError
	numStoreOutcomes
)

// String returns the outcome's label value.
func (o StoreOutcome) String() string {
	switch o {
	case StoreAdmitted:
		return "admitted"
	case StoreRefused:
		return "refused"
	case StoreError:
		return "error"
	}
	return "unknown"
}

// DecisionBuckets are the bounds, in seconds, of the decision and store
// latency histograms: from 25 µs, because a decision against the embedded
// store takes a few microseconds, to 100 ms, well past Envoy's 20 ms timeout.
var DecisionBuckets = []float64{
	0.000025, 0.00005, 0.0001, 0.00025, 0.0005,
	0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1,
}

// RuleHits is what one decision adds to a rule's counters, in request hits.
// The fields follow envoyproxy/ratelimit's per-rule stats.
type RuleHits struct {
	// Total is every hit the rule saw.
	Total uint64
	// OverLimit is the hits refused (or that would have been, in shadow mode).
	OverLimit uint64
	// NearLimit is the admitted hits that landed above the near-limit
	// threshold (NEAR_LIMIT_RATIO of the limit).
	NearLimit uint64
	// WithinLimit is the admitted hits.
	WithinLimit uint64
	// ShadowMode is the hits over the limit that shadow mode let through.
	ShadowMode uint64
}

// Metrics holds every collector of the service. Build it with New.
type Metrics struct {
	reg prometheus.Registerer

	decisions       *prometheus.CounterVec
	decisionLatency prometheus.Histogram

	ruleTotal  *prometheus.CounterVec
	ruleOver   *prometheus.CounterVec
	ruleNear   *prometheus.CounterVec
	ruleWithin *prometheus.CounterVec
	ruleShadow *prometheus.CounterVec

	storeLatency  [numStoreOutcomes]prometheus.Observer
	storeErrors   prometheus.Counter
	unavailable   [2]prometheus.Counter // allowed, blocked
	invalid       *prometheus.CounterVec
	reloadOK      prometheus.Gauge
	reloadLastOK  prometheus.Gauge
	reloads       [2]prometheus.Counter // failure, success
	chainRefusals [MaxChainDepth]prometheus.Counter
	money         *prometheus.CounterVec
	storeStats    atomic.Pointer[func() StoreStats]
	storeStatsReg sync.Once
	compat        atomic.Pointer[Compat] // envoyproxy/ratelimit's stats, when set
	adjust        adjustMetrics

	// Cached children of the labelled vectors: label lookups hash their
	// values on every call, and a decision records several.
	rules   sync.Map // MetricKey → *ruleCounters
	domains sync.Map // domain → *domainCounters
}

type ruleCounters struct {
	total, over, near, within, shadow prometheus.Counter
}

type domainCounters struct {
	ok, over prometheus.Counter
}

// New builds every collector and registers it with reg. A collector that is
// already registered (New called twice on one registry) is shared rather
// than duplicated. A nil reg builds unregistered collectors.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{reg: reg}
	m.decisions = register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ratelimit_decisions_total",
		Help: "Rate-limit decisions by domain and overall response code.",
	}, []string{"domain", "code"}))
	m.decisionLatency = register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "ratelimit_decision_duration_seconds",
		Help:    "Time to answer one ShouldRateLimit call, store included.",
		Buckets: DecisionBuckets,
	}))
	ruleVec := func(name, help string) *prometheus.CounterVec {
		return register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: name,
			Help: help,
		}, []string{"key"}))
	}
	m.ruleTotal = ruleVec("ratelimit_rule_hits_total", "Hits seen by each rule (key is the rule's descriptor key path).")
	m.ruleOver = ruleVec("ratelimit_rule_over_limit_hits_total", "Hits over each rule's limit.")
	m.ruleNear = ruleVec("ratelimit_rule_near_limit_hits_total", "Admitted hits above each rule's near-limit threshold.")
	m.ruleWithin = ruleVec("ratelimit_rule_within_limit_hits_total", "Hits within each rule's limit.")
	m.ruleShadow = ruleVec("ratelimit_rule_shadow_mode_hits_total", "Hits over each rule's limit that shadow mode let through.")

	storeLatency := register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "ratelimit_store_duration_seconds",
		Help:    "Time of one store decision by outcome (admitted, refused, error).",
		Buckets: DecisionBuckets,
	}, []string{"outcome"}))
	for o := range numStoreOutcomes {
		m.storeLatency[o] = storeLatency.WithLabelValues(o.String())
	}
	m.storeErrors = register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ratelimit_store_errors_total",
		Help: "Store calls that failed to decide (unavailable, timed out).",
	}))
	unavailable := register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ratelimit_on_unavailable_total",
		Help: "Decisions made by the ON_UNAVAILABLE policy because the store failed, by decision (allowed, blocked).",
	}, []string{"decision"}))
	m.unavailable[0] = unavailable.WithLabelValues("allowed")
	m.unavailable[1] = unavailable.WithLabelValues("blocked")
	m.invalid = register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ratelimit_invalid_requests_total",
		Help: "Requests refused with InvalidArgument, by reason.",
	}, []string{"reason"}))
	m.reloadOK = register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "ratelimit_config_last_reload_successful",
		Help: "Whether the last descriptor configuration reload succeeded (1) or failed (0).",
	}))
	m.reloadLastOK = register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "ratelimit_config_last_reload_success_timestamp_seconds",
		Help: "Unix time of the last successful descriptor configuration reload.",
	}))
	reloads := register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ratelimit_config_reloads_total",
		Help: "Descriptor configuration reload attempts by result (success, failure).",
	}, []string{"result"}))
	m.reloads[0] = reloads.WithLabelValues("failure")
	m.reloads[1] = reloads.WithLabelValues("success")
	chain := register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ratelimit_hierarchy_refusals_total",
		Help: "Descriptors of hierarchical rules refused, by the depth of the level that refused (0: the descriptor's own entity, 1: its parent, ...).",
	}, []string{"depth"}))
	for d := range m.chainRefusals {
		m.chainRefusals[d] = chain.WithLabelValues(strconv.Itoa(d))
	}
	m.money = register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ratelimit_money_charged_microdollars_total",
		Help: "Micro-dollars charged to money limits, by domain and resource: a resource the domain's prices list, or other.",
	}, []string{"domain", "resource"}))
	m.adjust = newAdjustMetrics(reg)
	return m
}

// OtherResource is the resource label of money charged for a resource the
// domain's prices do not list (request text never becomes a label).
const OtherResource = "other"

// MoneyCharged adds micros micro-dollars charged to the money limits of
// domain for resource, a name from the domain's price table or
// OtherResource.
func (m *Metrics) MoneyCharged(domain, resource string, micros uint64) {
	if m == nil || micros == 0 {
		return
	}
	m.money.WithLabelValues(domain, resource).Add(float64(micros))
}

// MaxChainDepth bounds the depth label of ratelimit_hierarchy_refusals_total:
// a chain is at most this many entities long (descriptors.MaxChain).
const MaxChainDepth = 8

// HierarchyRefusal records a descriptor of a hierarchical rule refused by
// the level at depth (0 is its own entity); depths past the bound count as
// the deepest.
func (m *Metrics) HierarchyRefusal(depth int) {
	if m == nil {
		return
	}
	m.chainRefusals[min(max(depth, 0), MaxChainDepth-1)].Inc()
}

// register registers c with reg and returns it, or returns the collector
// already registered under the same description.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if reg == nil {
		return c
	}
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
	}
	return c
}

// Registerer returns the registerer New was given (nil if none), so that
// other collectors of the process (a store's own metrics) can join it.
func (m *Metrics) Registerer() prometheus.Registerer {
	if m == nil {
		return nil
	}
	return m.reg
}

// ObserveDecision records one answered ShouldRateLimit call: its domain (a
// configured domain, or UnknownDomain), whether the overall code was
// OVER_LIMIT, and how long the answer took.
func (m *Metrics) ObserveDecision(domain string, overLimit bool, elapsed time.Duration) {
	if m == nil {
		return
	}
	dc, ok := m.domains.Load(domain)
	if !ok {
		dc, _ = m.domains.LoadOrStore(domain, &domainCounters{
			ok:   m.decisions.WithLabelValues(domain, CodeOK),
			over: m.decisions.WithLabelValues(domain, CodeOverLimit),
		})
	}
	c := dc.(*domainCounters)
	if overLimit {
		c.over.Inc()
	} else {
		c.ok.Inc()
	}
	m.decisionLatency.Observe(elapsed.Seconds())
}

// ObserveRule adds h to the counters of the rule whose metric key is key
// (descriptors.Match.MetricKey).
func (m *Metrics) ObserveRule(key string, h RuleHits) {
	if m == nil {
		return
	}
	rc, ok := m.rules.Load(key)
	if !ok {
		rc, _ = m.rules.LoadOrStore(key, &ruleCounters{
			total:  m.ruleTotal.WithLabelValues(key),
			over:   m.ruleOver.WithLabelValues(key),
			near:   m.ruleNear.WithLabelValues(key),
			within: m.ruleWithin.WithLabelValues(key),
			shadow: m.ruleShadow.WithLabelValues(key),
		})
	}
	c := rc.(*ruleCounters)
	addHits(c.total, h.Total)
	addHits(c.over, h.OverLimit)
	addHits(c.near, h.NearLimit)
	addHits(c.within, h.WithinLimit)
	addHits(c.shadow, h.ShadowMode)
	if cs := m.compat.Load(); cs != nil {
		cs.rule(key, h)
	}
}

func addHits(c prometheus.Counter, n uint64) {
	if n > 0 {
		c.Add(float64(n))
	}
}

// ObserveStore records one store call: its outcome and latency. Errors also
// count in ratelimit_store_errors_total.
func (m *Metrics) ObserveStore(outcome StoreOutcome, elapsed time.Duration) {
	if m == nil || outcome < 0 || outcome >= numStoreOutcomes {
		return
	}
	m.storeLatency[outcome].Observe(elapsed.Seconds())
	if outcome == StoreError {
		m.storeErrors.Inc()
		if cs := m.compat.Load(); cs != nil {
			cs.count("ratelimit.service.call.should_rate_limit.redis_error")
		}
	}
}

// OnUnavailable records a decision made by the ON_UNAVAILABLE policy after a
// store failure: blocked (OVER_LIMIT) or allowed (OK).
func (m *Metrics) OnUnavailable(blocked bool) {
	if m == nil {
		return
	}
	if blocked {
		m.unavailable[1].Inc()
	} else {
		m.unavailable[0].Inc()
	}
}

// InvalidRequest records a request refused as invalid. reason must come from
// a fixed set of the caller's constants, never from request text.
func (m *Metrics) InvalidRequest(reason string) {
	if m == nil {
		return
	}
	m.invalid.WithLabelValues(reason).Inc()
	if cs := m.compat.Load(); cs != nil {
		cs.count("ratelimit.service.call.should_rate_limit.service_error")
	}
}

// ObserveReload records a descriptor configuration reload attempt at at.
func (m *Metrics) ObserveReload(ok bool, at time.Time) { m.ObserveSourceReload(ok, ok, at) }

// ObserveSourceReload records an attempt at at of one of several sources
// the configuration is made of (rules pushed over xDS, adjustments from a
// directory): the counters by ok, and the last-reload gauge by healthy,
// whether the last attempt of every source succeeded, so that a success
// of one source does not hide a failure of the other.
func (m *Metrics) ObserveSourceReload(ok, healthy bool, at time.Time) {
	if m == nil {
		return
	}
	if cs := m.compat.Load(); cs != nil {
		if ok {
			cs.count("ratelimit.service.config_load_success")
		} else {
			cs.count("ratelimit.service.config_load_error")
		}
	}
	if ok {
		m.reloads[1].Inc()
		m.reloadLastOK.Set(float64(at.UnixNano()) / 1e9)
	} else {
		m.reloads[0].Inc()
	}
	if healthy {
		m.reloadOK.Set(1)
	} else {
		m.reloadOK.Set(0)
	}
}
