package service

import (
	"context"
	"errors"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dynalimit/dynalimit/internal/adjust"
	"github.com/dynalimit/dynalimit/internal/metrics"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/descriptors"
)

// Default response header names, as envoyproxy/ratelimit names them.
const (
	DefaultLimitHeader     = "RateLimit-Limit"
	DefaultRemainingHeader = "RateLimit-Remaining"
	DefaultResetHeader     = "RateLimit-Reset"
)

// DefaultNearLimitRatio is envoyproxy/ratelimit's NEAR_LIMIT_RATIO default.
const DefaultNearLimitRatio = 0.8

// contendedRetry is the retry-after of a request refused because the store
// was too busy to read its hierarchy within the budget.
const contendedRetry = 10 * time.Millisecond

// Service answers ShouldRateLimit. Build it with New.
type Service struct {
	store     Store
	hierarchy Hierarchy     // stored entity ancestors; nil: configured chains only
	gate      NamespaceGate // deleted namespaces; nil: none
	config    func() *descriptors.Config
	metrics   *metrics.Metrics
	log       *logrus.Entry
	now       func() time.Time
	limits    RequestLimits

	shadow          bool
	nearRatio       float64
	headers         bool
	limitHeader     string
	remainingHeader string
	resetHeader     string
	dynamicMetadata bool
	// extendedMetadata adds this service's fields to the dynamic metadata
	// (RESPONSE_DYNAMIC_METADATA_FORMAT=extended).
	extendedMetadata bool
	// chargeDescriptorHits charges a descriptor's own hits_addend on limits
	// without a charge mode (the default); false consumes it all or nothing
	// (DESCRIPTOR_HITS_ADDEND=consume).
	chargeDescriptorHits bool
	block                bool
	// adjust issues and settles leases (WithAdjuster); nil: no leases.
	adjust *adjust.Adjuster

	decideRawFn grpc.UnaryHandler     // decideRaw, bound once
	rlsInfo     *grpc.UnaryServerInfo // what interceptors are told of a call, built once

	// failLog throttles store-failure logs: an outage logs once a second
	// with the count of failures it did not log, not once per request.
	failLog throttle
}

var _ pb.RateLimitServiceServer = (*Service)(nil)

// Option configures a Service.
type Option func(*Service)

// WithMetrics records decisions, rule hits, invalid requests and
// ON_UNAVAILABLE decisions in m. Store latency is recorded by wrapping the
// store with Instrument.
func WithMetrics(m *metrics.Metrics) Option { return func(s *Service) { s.metrics = m } }

// WithLogger sets the logger; the service adds component=service.
func WithLogger(l *logrus.Entry) Option {
	return func(s *Service) {
		if l != nil {
			s.log = l.WithField("component", "service")
		}
	}
}

// WithClock sets the clock used to time decisions.
func WithClock(now func() time.Time) Option {
	return func(s *Service) {
		if now != nil {
			s.now = now
		}
	}
}

// WithRequestLimits bounds the size of a request (REQUEST_MAX_DESCRIPTORS,
// REQUEST_MAX_ENTRIES, REQUEST_MAX_ENTRY_BYTES); unset fields keep their
// defaults.
func WithRequestLimits(l RequestLimits) Option {
	return func(s *Service) { s.limits = l.withDefaults() }
}

// WithShadowMode turns on the global shadow mode (envoyproxy's SHADOW_MODE):
// every refusal is reported and counted, and the overall code is always OK.
func WithShadowMode(on bool) Option { return func(s *Service) { s.shadow = on } }

// WithNearLimitRatio sets the fraction of a limit above which admitted hits
// count as near the limit (NEAR_LIMIT_RATIO, default 0.8). Values outside
// [0, 1] are clamped; NaN keeps the default.
func WithNearLimitRatio(r float64) Option {
	return func(s *Service) {
		if r == r { // not NaN
			s.nearRatio = min(max(r, 0), 1)
		}
	}
}

// WithResponseHeaders adds RateLimit-Limit, -Remaining and -Reset headers
// (envoyproxy's LIMIT_RESPONSE_HEADERS_ENABLED) taken from the most
// restrictive descriptor. Empty names keep the defaults.
func WithResponseHeaders(enabled bool, limit, remaining, reset string) Option {
	return func(s *Service) {
		s.headers = enabled
		if limit != "" {
			s.limitHeader = limit
		}
		if remaining != "" {
			s.remainingHeader = remaining
		}
		if reset != "" {
			s.resetHeader = reset
		}
	}
}

// WithDynamicMetadata returns the request as dynamic metadata, with the
// metadata of the rules that passed, as envoyproxy/ratelimit's
// RESPONSE_DYNAMIC_METADATA does (see WithExtendedMetadata for more).
func WithDynamicMetadata(on bool) Option { return func(s *Service) { s.dynamicMetadata = on } }

// WithExtendedMetadata adds this service's own fields to the dynamic
// metadata (quotaModeEnabled, quotaModeViolations, limit overrides as
// structs); without it the metadata has envoyproxy/ratelimit's shape.
func WithExtendedMetadata(on bool) Option { return func(s *Service) { s.extendedMetadata = on } }

// WithDescriptorHitsCharge says how a descriptor's own positive hits_addend
// debits a limit whose configuration names no charge mode: charged (true,
// the default: cost already spent, debited even past zero, as Envoy's
// apply_on_stream_done reports it) or consumed all-or-nothing (false).
func WithDescriptorHitsCharge(on bool) Option {
	return func(s *Service) { s.chargeDescriptorHits = on }
}

// WithHierarchy charges the stored ancestors that h names above the topmost
// entity of every cascading rule (see Hierarchy); without it only the
// entity levels of the descriptor configuration are charged.
func WithHierarchy(h Hierarchy) Option { return func(s *Service) { s.hierarchy = h } }

// WithNamespaceGate makes the service answer the rules of the namespaces
// g holds deleted as unmatched (see NamespaceGate); nil, the default,
// decides for every namespace.
func WithNamespaceGate(g NamespaceGate) Option { return func(s *Service) { s.gate = g } }

// WithOnUnavailable sets what a decision is when the store fails: block
// (OVER_LIMIT) when true, allow (OK, the default) when false. A store that
// decides locally when the shared one fails (internal/degrade,
// ON_UNAVAILABLE=local) fails only for the caller's own cancellation.
func WithOnUnavailable(block bool) Option { return func(s *Service) { s.block = block } }

// New returns a Service deciding with store against the configuration that
// config returns (loaded once per request; nil means none is loaded yet).
func New(store Store, config func() *descriptors.Config, opts ...Option) *Service {
	s := &Service{
		store:           store,
		config:          config,
		log:             logrus.NewEntry(logrus.StandardLogger()).WithField("component", "service"),
		now:             time.Now,
		limits:          RequestLimits{}.withDefaults(),
		nearRatio:       DefaultNearLimitRatio,
		limitHeader:     DefaultLimitHeader,
		remainingHeader: DefaultRemainingHeader,
		resetHeader:     DefaultResetHeader,

		chargeDescriptorHits: true,
	}
	for _, o := range opts {
		o(s)
	}
	s.decideRawFn = s.decideRaw
	s.rlsInfo = &grpc.UnaryServerInfo{Server: s, FullMethod: pb.RateLimitService_ShouldRateLimit_FullMethodName}
	return s
}

// ShouldRateLimit decides one request. It returns InvalidArgument for a
// malformed request and Unavailable when no configuration is loaded; store
// failures are decisions made by the ON_UNAVAILABLE policy.
func (s *Service) ShouldRateLimit(ctx context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	resp, _, err := s.decide(ctx, req)
	return resp, err
}

// decide answers req and reports whether the store failed and the policy
// blocked the request. The phases, each in its own file:
//
//	parse (request.go)                    what each descriptor asked
//	resolve, replace (plan.go)            which rule applies to each
//	plan (plan.go)                        one plan of debits for the store
//	readDecision, unavailable (outcome.go) what the store's answer means for each
//	respond (respond.go)                  statuses, headers, dynamic metadata
//	observe (observe.go)                  metrics
func (s *Service) decide(ctx context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, bool, error) {
	var start time.Time
	if s.metrics != nil {
		start = s.now()
	}
	items, err := s.parse(req)
	if err != nil {
		return nil, false, s.refuse(err)
	}
	cfg := s.config()
	if cfg == nil {
		return nil, false, status.Error(codes.Unavailable, "service: no rate limit configuration loaded")
	}
	domain := req.GetDomain()
	if err := s.settlingCounts(cfg, domain, items); err != nil {
		return nil, false, s.refuse(err)
	}
	known := cfg.HasDomain(domain)
	if known {
		if err := s.resolve(cfg, req, items); err != nil {
			return nil, false, s.refuse(err)
		}
	}
	replace(items)
	if err := s.tiers(domain, items); err != nil {
		return nil, false, s.refuse(err)
	}
	storeErr := s.ancestors(ctx, items)
	plan, forced := s.plan(items)
	var dec cascade.Decision
	switch {
	case errors.Is(storeErr, cascade.ErrContended):
		// Too busy to read the hierarchy within the budget: contention,
		// refused (never ON_UNAVAILABLE).
		storeErr = nil
		dec = cascade.Busy(plan.Debits, contendedRetry)
	case storeErr == nil && len(plan.Debits) > 0:
		dec, storeErr = s.store.Acquire(ctx, &plan)
		if storeErr == nil && len(dec.Statuses) != len(plan.Debits) {
			storeErr = errStatuses
		}
	}
	if errors.Is(storeErr, cascade.ErrInvalid) {
		// The store cannot hold what the request names (a value past its
		// size limit): a bad request, never ON_UNAVAILABLE.
		return nil, false, s.refuse(invalid(reasonUnstorable, "service: "+storeErr.Error()))
	}
	if storeErr != nil && ctx.Err() != nil {
		return nil, false, status.FromContextError(ctx.Err()).Err()
	}

	over, blocked := false, false
	if storeErr != nil {
		blocked = s.block && enforced(&plan) && !s.shadow
		s.metrics.OnUnavailable(blocked)
		s.logStoreFailure(storeErr, domainLabel(known, domain), len(items), len(plan.Debits))
		over = forced || blocked
		unavailable(items, blocked)
	} else {
		over = forced || (len(plan.Debits) > 0 && !dec.Admitted)
		readDecision(items, &dec)
	}
	if s.shadow {
		over = false
	}
	if s.adjust != nil {
		s.settleLeases(ctx, items)
	}
	resp := s.respond(req, items, over, storeErr == nil)
	if dec.Local {
		markLocal(resp)
	}
	if s.adjust != nil && known && storeErr == nil && !over && dec.Admitted {
		s.issueLease(cfg, domain, items, &plan, &dec, resp)
	}
	s.observe(known, domain, items, over, start)
	return resp, blocked, nil
}

// refuse counts an invalid request and returns its InvalidArgument status;
// any other error is returned as it is.
func (s *Service) refuse(err error) error {
	var inv *invalidError
	if !errors.As(err, &inv) {
		return err
	}
	s.metrics.InvalidRequest(inv.reason)
	return status.Error(codes.InvalidArgument, inv.msg)
}

// logStoreFailure logs a store failure, at most once a second.
func (s *Service) logStoreFailure(err error, domain string, descriptors, debits int) {
	ok, suppressed := s.failLog.allow(s.now(), time.Second)
	if !ok {
		return
	}
	s.log.WithError(err).WithFields(logrus.Fields{
		"domain":         domain,
		"descriptors":    descriptors,
		"debits":         debits,
		"on_unavailable": policyName(s.block),
		"suppressed":     suppressed,
	}).Warn("store failed; decided by on_unavailable")
}

type serviceError string

func (e serviceError) Error() string { return string(e) }

const errStatuses = serviceError("service: store returned a status count that does not match the plan")

func policyName(block bool) string {
	if block {
		return "block"
	}
	return "allow"
}
