package service

import (
	"context"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/sirupsen/logrus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/dynalimit/dynalimit/internal/metrics"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/descriptors"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// MaxHits is the largest number of hits one descriptor may add (or refund).
const MaxHits = 1_000_000_000_000

// Default response header names, as envoyproxy/ratelimit names them.
const (
	DefaultLimitHeader     = "RateLimit-Limit"
	DefaultRemainingHeader = "RateLimit-Remaining"
	DefaultResetHeader     = "RateLimit-Reset"
)

// DefaultNearLimitRatio is envoyproxy/ratelimit's NEAR_LIMIT_RATIO default.
const DefaultNearLimitRatio = 0.8

// Reasons for InvalidArgument, used as the reason label of
// ratelimit_invalid_requests_total.
const (
	reasonEmptyDomain   = "empty_domain"
	reasonNoDescriptors = "no_descriptors"
	reasonNoEntries     = "empty_descriptor"
	reasonEmptyKey      = "empty_entry_key"
	reasonHits          = "hits_overflow"
	reasonOverride      = "invalid_limit_override"
)

// Service answers ShouldRateLimit. Build it with New.
type Service struct {
	store   Store
	config  func() *descriptors.Config
	metrics *metrics.Metrics
	log     *logrus.Entry
	now     func() time.Time

	shadow          bool
	nearRatio       float64
	headers         bool
	limitHeader     string
	remainingHeader string
	resetHeader     string
	dynamicMetadata bool
	block           bool

	// failLog throttles store-failure logs: an outage logs once a second
	// with the count of failures it did not log, not once per request.
	failLog throttle
}

// throttle lets one event through per interval and counts the rest.
type throttle struct {
	last       atomic.Int64 // unix nanoseconds of the last event let through
	suppressed atomic.Int64
}

// allow reports whether an event at now may be logged, and how many events
// were suppressed since the last one that was.
func (t *throttle) allow(now time.Time, every time.Duration) (bool, int64) {
	last := t.last.Load()
	if now.UnixNano()-last < int64(every) || !t.last.CompareAndSwap(last, now.UnixNano()) {
		t.suppressed.Add(1)
		return false, 0
	}
	return true, t.suppressed.Swap(0)
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

// WithDynamicMetadata returns the request as dynamic metadata
// (envoyproxy's RESPONSE_DYNAMIC_METADATA), with the quota-mode fields.
func WithDynamicMetadata(on bool) Option { return func(s *Service) { s.dynamicMetadata = on } }

// WithOnUnavailable sets what a decision is when the store fails: block
// (OVER_LIMIT) when true, allow (OK, the default) when false.
func WithOnUnavailable(block bool) Option { return func(s *Service) { s.block = block } }

// New returns a Service deciding with store against the configuration that
// config returns (loaded once per request; nil means none is loaded yet).
func New(store Store, config func() *descriptors.Config, opts ...Option) *Service {
	s := &Service{
		store:           store,
		config:          config,
		log:             logrus.NewEntry(logrus.StandardLogger()).WithField("component", "service"),
		now:             time.Now,
		nearRatio:       DefaultNearLimitRatio,
		limitHeader:     DefaultLimitHeader,
		remainingHeader: DefaultRemainingHeader,
		resetHeader:     DefaultResetHeader,
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

// item is what the service knows about one request descriptor.
type item struct {
	entries []descriptors.Entry
	match   descriptors.Match
	hits    uint64
	// limits are the limits to apply: the rule's, or one override limit.
	limits []descriptors.Limit
	// first is the index in the plan of the first debit of limits (deny
	// limits have no debit).
	first     int
	role      cascade.Role
	matched   bool // some rule matched
	override  bool // limits come from the descriptor's limit override
	unlimited bool
	replaced  bool
	quota     bool // the rule is in quota mode
	shadow    bool // the rule is in shadow mode (not the global mode)
	negative  bool
	// result, filled after the decision, for the most restrictive limit.
	worst    int // index in limits, -1 when none applies
	refused  bool
	remain   int64
	retry    time.Duration
	reset    time.Duration
	bucket   tokenbucket.Limit // the limit the store applied to worst
	violated bool              // some limit refused (before shadow)
}

// applies reports whether the item's limits take part in the decision.
func (it *item) applies() bool {
	return len(it.limits) > 0 && !it.unlimited && !it.replaced
}

// ShouldRateLimit decides one request. It returns InvalidArgument for a
// malformed request and Unavailable when no configuration is loaded; store
// failures are decisions made by the ON_UNAVAILABLE policy.
func (s *Service) ShouldRateLimit(ctx context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	resp, _, err := s.decide(ctx, req)
	return resp, err
}

// decide answers req and reports whether the store failed and the policy
// blocked the request.
func (s *Service) decide(ctx context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, bool, error) {
	var start time.Time
	if s.metrics != nil {
		start = s.now()
	}
	items, reason, msg := s.parse(req)
	if reason != "" {
		s.metrics.InvalidRequest(reason)
		return nil, false, status.Error(codes.InvalidArgument, msg)
	}
	cfg := s.config()
	if cfg == nil {
		return nil, false, status.Error(codes.Unavailable, "service: no rate limit configuration loaded")
	}
	domain := req.GetDomain()
	known := cfg.HasDomain(domain)
	if known {
		if err := s.resolve(cfg, req, items); err != nil {
			s.metrics.InvalidRequest(reasonOverride)
			return nil, false, err
		}
	}
	replace(items)

	plan, forced := s.plan(domain, items)
	var (
		dec      cascade.Decision
		storeErr error
	)
	if len(plan.Debits) > 0 {
		dec, storeErr = s.store.Acquire(ctx, &plan)
		if storeErr == nil && len(dec.Statuses) != len(plan.Debits) {
			storeErr = errStatuses
		}
	}
	if storeErr != nil && ctx.Err() != nil {
		return nil, false, status.FromContextError(ctx.Err()).Err()
	}

	over, blocked := false, false
	if storeErr != nil {
		enforced := false
		for i := range plan.Debits {
			enforced = enforced || plan.Debits[i].Role != cascade.Advisory
		}
		blocked = s.block && enforced && !s.shadow
		s.metrics.OnUnavailable(blocked)
		if ok, suppressed := s.failLog.allow(s.now(), time.Second); ok {
			s.log.WithError(storeErr).WithFields(logrus.Fields{
				"domain":         domainLabel(known, domain),
				"descriptors":    len(items),
				"debits":         len(plan.Debits),
				"on_unavailable": policyName(s.block),
				"suppressed":     suppressed,
			}).Warn("store failed; decided by on_unavailable")
		}
		over = forced || blocked
		s.unavailable(items, blocked)
	} else {
		over = forced || (len(plan.Debits) > 0 && !dec.Admitted)
		s.settle(items, &plan, &dec)
	}
	if s.shadow {
		over = false
	}
	resp := s.respond(req, items, over, storeErr == nil)
	s.observe(known, domain, items, over, start)
	return resp, blocked, nil
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

func domainLabel(known bool, domain string) string {
	if known {
		return domain
	}
	return metrics.UnknownDomain
}

// parse validates req and converts its descriptors. On failure it returns a
// reason label and the message for InvalidArgument.
func (s *Service) parse(req *pb.RateLimitRequest) ([]item, string, string) {
	if req.GetDomain() == "" {
		return nil, reasonEmptyDomain, "service: rate limit domain must not be empty"
	}
	ds := req.GetDescriptors()
	if len(ds) == 0 {
		return nil, reasonNoDescriptors, "service: rate limit descriptor list must not be empty"
	}
	total := 0
	for _, d := range ds {
		total += len(d.GetEntries())
	}
	entries := make([]descriptors.Entry, total)
	items := make([]item, len(ds))
	reqHits := uint64(1)
	if h := req.GetHitsAddend(); h != 0 {
		reqHits = uint64(h)
	}
	n := 0
	for i, d := range ds {
		es := d.GetEntries()
		if len(es) == 0 {
			return nil, reasonNoEntries, "service: descriptor " + strconv.Itoa(i) + " has no entries"
		}
		it := &items[i]
		it.entries = entries[n : n+len(es) : n+len(es)]
		for j, e := range es {
			if e.GetKey() == "" {
				return nil, reasonEmptyKey, "service: descriptor " + strconv.Itoa(i) + " entry " + strconv.Itoa(j) + " has an empty key"
			}
			it.entries[j] = descriptors.Entry{Key: e.GetKey(), Value: e.GetValue()}
		}
		n += len(es)
		it.hits = reqHits
		if h := d.GetHitsAddend(); h != nil {
			it.hits = h.GetValue()
		}
		if it.hits > MaxHits {
			return nil, reasonHits, "service: descriptor " + strconv.Itoa(i) + " hits " + strconv.FormatUint(it.hits, 10) + " exceed " + strconv.FormatUint(MaxHits, 10)
		}
		it.negative = d.GetIsNegativeHits()
		it.worst = -1
	}
	return items, "", ""
}

// resolve matches each descriptor of a known domain and applies limit
// overrides.
func (s *Service) resolve(cfg *descriptors.Config, req *pb.RateLimitRequest, items []item) error {
	domain := req.GetDomain()
	ds := req.GetDescriptors()
	nov := 0
	for _, d := range ds {
		if d.GetLimit() != nil {
			nov++
		}
	}
	var ovs []descriptors.Limit
	if nov > 0 {
		ovs = make([]descriptors.Limit, 0, nov)
	}
	for i := range items {
		it := &items[i]
		it.match, it.matched = cfg.Match(domain, it.entries)
		if o := ds[i].GetLimit(); o != nil {
			l, err := overrideLimit(o)
			if err != nil {
				return status.Error(codes.InvalidArgument, "service: descriptor "+strconv.Itoa(i)+": "+err.Error())
			}
			ovs = append(ovs, l)
			it.limits = ovs[len(ovs)-1 : len(ovs) : len(ovs)]
			it.override = true
			continue
		}
		if !it.matched {
			continue
		}
		r := it.match.Rule
		it.unlimited = r.Unlimited
		it.limits = r.Limits
		it.shadow = r.ShadowMode
		it.quota = r.QuotaMode
	}
	return nil
}

// overrideLimit builds the limit of a descriptor's limit override.
func overrideLimit(o *rlv3.RateLimitDescriptor_RateLimitOverride) (descriptors.Limit, error) {
	unit := descriptors.Unit(o.GetUnit())
	d := unit.Duration()
	if d == 0 {
		return descriptors.Limit{}, serviceError("limit override has no valid unit")
	}
	mult := uint32(1)
	if m := o.GetUnitMultiplier(); m != nil && m.GetValue() > 0 {
		mult = m.GetValue()
	}
	if int64(mult) > math.MaxInt64/int64(d) {
		return descriptors.Limit{}, serviceError("limit override period overflows")
	}
	rpu := uint64(o.GetRequestsPerUnit())
	var b strings.Builder
	b.WriteString("override_")
	b.WriteString(strconv.FormatUint(rpu, 10))
	b.WriteString("_per_")
	if mult != 1 {
		b.WriteString(strconv.FormatUint(uint64(mult), 10))
		b.WriteByte('_')
	}
	b.WriteString(unit.String())
	l := descriptors.Limit{
		ID:              b.String(),
		Unit:            unit,
		RequestsPerUnit: rpu,
		UnitMultiplier:  mult,
		Deny:            rpu == 0,
	}
	if rpu == 0 {
		return l, nil
	}
	bucket, err := tokenbucket.Rate(rpu, d*time.Duration(mult), 0)
	if err != nil {
		return descriptors.Limit{}, serviceError("limit override: " + err.Error())
	}
	l.Bucket = bucket
	return l, nil
}

// replace marks the items whose rule another matched rule replaces, as
// envoyproxy/ratelimit does (overridden descriptors neither replace nor are
// replaced).
func replace(items []item) {
	for i := range items {
		a := &items[i]
		if !a.matched || a.override || len(a.match.Rule.Replaces) == 0 {
			continue
		}
		for j := range items {
			b := &items[j]
			if j == i || !b.matched || b.override || b.replaced || b.match.Rule.Name == "" {
				continue
			}
			for _, name := range a.match.Rule.Replaces {
				if name == b.match.Rule.Name {
					b.replaced = true
					break
				}
			}
		}
	}
}

// plan builds the request's one plan and reports whether the request is
// refused whatever the store says (a deny limit that enforces, or quota
// denies with no quota debit left to pass). A forced refusal turns every
// consume into a check, so that the store reports without debiting.
func (s *Service) plan(domain string, items []item) (cascade.Plan, bool) {
	n := 0
	for i := range items {
		if it := &items[i]; it.applies() {
			n += len(it.limits)
		}
	}
	if n == 0 {
		return cascade.Plan{}, false
	}
	debits := make([]cascade.Debit, 0, n)
	enforceDeny, quotaDeny, quotaDebits := false, false, 0
	for i := range items {
		it := &items[i]
		if !it.applies() {
			continue
		}
		switch {
		case s.shadow || (it.shadow && !it.override):
			it.role = cascade.Advisory
		case it.quota && !it.override:
			it.role = cascade.Quota
		default:
			it.role = cascade.Enforce
		}
		it.first = len(debits)
		var key cascade.Key
		keyed := false
		for li := range it.limits {
			l := &it.limits[li]
			if l.Deny {
				if it.negative {
					continue // a refund to a deny limit changes nothing
				}
				switch it.role {
				case cascade.Enforce:
					enforceDeny = true
				case cascade.Quota:
					quotaDeny = true
				}
				continue
			}
			if !keyed {
				key = s.key(domain, it)
				keyed = true
			}
			d := cascade.Debit{
				Key:    key,
				Limit:  l.ID,
				Bucket: l.Bucket,
				Amount: tokenbucket.Millitokens(it.hits) * tokenbucket.PerToken,
				Role:   it.role,
			}
			switch {
			case it.negative:
				d.Op = cascade.Refund
			case it.hits == 0:
				d.Op = cascade.Check
			case l.Charge == descriptors.ChargePost:
				d.Op = cascade.Charge
			default:
				d.Op = cascade.Consume
			}
			if it.role == cascade.Quota {
				quotaDebits++
			}
			debits = append(debits, d)
		}
	}
	forced := enforceDeny || (quotaDeny && quotaDebits == 0)
	if forced {
		for i := range debits {
			if debits[i].Op == cascade.Consume {
				debits[i].Op = cascade.Check
				debits[i].Amount = 0
			}
		}
	}
	return cascade.Plan{Debits: debits}, forced
}

// key returns the bucket item of an item's limits.
func (s *Service) key(domain string, it *item) cascade.Key {
	if it.matched {
		return cascade.Key{Namespace: it.match.Rule.Namespace, Entity: it.match.EntityID(), Resource: domain}
	}
	return cascade.Key{Namespace: descriptors.DefaultNamespace, Entity: descriptors.Match{Entries: it.entries}.EntityID(), Resource: domain}
}

// settle reads the decision into each item: its most restrictive limit.
func (s *Service) settle(items []item, p *cascade.Plan, dec *cascade.Decision) {
	for i := range items {
		it := &items[i]
		if !it.applies() {
			continue
		}
		k := it.first
		for li := range it.limits {
			l := &it.limits[li]
			var (
				refused      bool
				remain       int64
				retry, reset time.Duration
				bucket       tokenbucket.Limit
			)
			if l.Deny {
				refused = !it.negative
			} else {
				st := &dec.Statuses[k]
				k++
				refused = !st.OK
				if !refused {
					remain = max(int64(st.Remaining/tokenbucket.PerToken), 0)
				}
				retry, reset, bucket = st.RetryAfter, st.ResetAfter, st.Bucket
			}
			it.violated = it.violated || refused
			if it.worst < 0 || (refused && !it.refused) || (refused == it.refused && remain < it.remain) {
				it.worst, it.refused, it.remain, it.retry, it.reset, it.bucket = li, refused, remain, retry, reset, bucket
			}
		}
	}
}

// unavailable fills each item after a store failure: deny limits refuse, and
// every other limit is refused when the policy blocks.
func (s *Service) unavailable(items []item, blocked bool) {
	for i := range items {
		it := &items[i]
		if !it.applies() {
			continue
		}
		it.worst = 0
		for li := range it.limits {
			if it.limits[li].Deny && !it.negative {
				it.worst = li
				it.refused = true
				break
			}
		}
		it.refused = it.refused || (blocked && it.role != cascade.Advisory)
		it.violated = it.refused
	}
}

// respond builds the response from the settled items.
func (s *Service) respond(req *pb.RateLimitRequest, items []item, over, decided bool) *pb.RateLimitResponse {
	n := len(items)
	resp := &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK}
	if over {
		resp.OverallCode = pb.RateLimitResponse_OVER_LIMIT
	}
	// One allocation holds every status with its limit and reset.
	slots := make([]respSlot, n)
	resp.Statuses = make([]*pb.RateLimitResponse_DescriptorStatus, n)
	best := -1 // the most restrictive descriptor, for headers
	for i := range items {
		it := &items[i]
		slot := &slots[i]
		st := &slot.status
		resp.Statuses[i] = st
		st.Code = pb.RateLimitResponse_OK
		if it.unlimited && !it.replaced {
			st.LimitRemaining = math.MaxUint32
			continue
		}
		if !it.applies() || it.worst < 0 {
			continue
		}
		l := &it.limits[it.worst]
		cl := &slot.limit
		cl.Name = l.Name
		rpu, unit, mult := l.RequestsPerUnit, l.Unit, l.UnitMultiplier
		if it.bucket != (tokenbucket.Limit{}) && it.bucket != l.Bucket {
			rpu, unit, mult = describe(it.bucket) // the store applied a stored override
		}
		cl.RequestsPerUnit = uint32(min(rpu, math.MaxUint32))
		cl.Unit = pb.RateLimitResponse_RateLimit_Unit(unit)
		if mult > 1 {
			cl.UnitMultiplier = wrapperspb.UInt32(mult)
		}
		st.CurrentLimit = cl
		if it.refused && !(it.shadow && !it.override) {
			st.Code = pb.RateLimitResponse_OVER_LIMIT
		}
		st.LimitRemaining = uint32(min(it.remain, math.MaxUint32))
		if decided {
			d := &slot.reset
			d.Seconds = int64(it.reset / time.Second)
			d.Nanos = int32(it.reset % time.Second)
			st.DurationUntilReset = d
		}
		if decided && s.headers && s.restricts(items, i, best) {
			best = i
		}
	}
	if best >= 0 {
		resp.ResponseHeadersToAdd = s.headerValues(&items[best], resp.Statuses[best])
	}
	if s.dynamicMetadata {
		resp.DynamicMetadata = metadata(req, items)
	}
	return resp
}

// respSlot holds one descriptor's status and what it points to.
type respSlot struct {
	status pb.RateLimitResponse_DescriptorStatus
	limit  pb.RateLimitResponse_RateLimit
	reset  durationpb.Duration
}

// restricts reports whether item i is more restrictive than item best for
// the headers: an enforced refusal first, then the fewest remaining tokens.
func (s *Service) restricts(items []item, i, best int) bool {
	if best < 0 {
		return true
	}
	a, b := &items[i], &items[best]
	ae, be := a.enforcedRefusal(), b.enforcedRefusal()
	if ae != be {
		return ae
	}
	return a.remain < b.remain
}

func (it *item) enforcedRefusal() bool {
	return it.refused && it.role == cascade.Enforce
}

// headerValues formats the RateLimit-* headers from one descriptor's status
// as envoyproxy/ratelimit does; the reset is whole seconds, rounded up: the
// retry-after when refused, the time until the bucket is full otherwise.
func (s *Service) headerValues(it *item, st *pb.RateLimitResponse_DescriptorStatus) []*corev3.HeaderValue {
	reset := it.reset
	if it.refused {
		reset = it.retry
	}
	secs := int64((reset + time.Second - 1) / time.Second)
	hv := make([]corev3.HeaderValue, 3)
	hv[0].Key, hv[0].Value = s.limitHeader, strconv.FormatUint(uint64(st.GetCurrentLimit().GetRequestsPerUnit()), 10)
	hv[1].Key, hv[1].Value = s.remainingHeader, strconv.FormatUint(uint64(st.GetLimitRemaining()), 10)
	hv[2].Key, hv[2].Value = s.resetHeader, strconv.FormatInt(secs, 10)
	return []*corev3.HeaderValue{&hv[0], &hv[1], &hv[2]}
}

// observe records the decision's metrics.
func (s *Service) observe(known bool, domain string, items []item, over bool, start time.Time) {
	if s.metrics == nil {
		return
	}
	for i := range items {
		it := &items[i]
		if !it.applies() || it.negative || it.worst < 0 {
			continue
		}
		key := it.metricKey(domain)
		h := metrics.RuleHits{Total: it.hits}
		if it.violated {
			h.OverLimit = it.hits
			if it.role == cascade.Advisory {
				h.ShadowMode = it.hits
			}
		} else {
			h.WithinLimit = it.hits
			h.NearLimit = s.nearHits(it)
		}
		s.metrics.ObserveRule(key, h)
	}
	s.metrics.ObserveDecision(domainLabel(known, domain), over, s.now().Sub(start))
}

// nearHits returns how many of an admitted item's hits landed above the
// near-limit threshold of its most restrictive limit.
func (s *Service) nearHits(it *item) uint64 {
	l := &it.limits[it.worst]
	capacity := int64(l.Bucket.Capacity / tokenbucket.PerToken)
	threshold := int64(math.Floor(float64(capacity) * s.nearRatio))
	used := capacity - it.remain
	if used <= threshold {
		return 0
	}
	return min(it.hits, uint64(used-threshold))
}

// metricKey returns the item's rule key: the match's, or for an override on
// an unmatched descriptor the domain and the entry keys (never values).
func (it *item) metricKey(domain string) string {
	if it.matched {
		return it.match.MetricKey
	}
	var b strings.Builder
	b.WriteString(domain)
	for _, e := range it.entries {
		b.WriteByte('.')
		b.WriteString(e.Key)
	}
	return b.String()
}

// describeUnits are the units describe tries, largest first.
var describeUnits = [...]descriptors.Unit{descriptors.Year, descriptors.Month, descriptors.Week, descriptors.Day, descriptors.Hour, descriptors.Minute, descriptors.Second}

// describe expresses a bucket limit as Envoy's rate limit: whole requests
// (rounded up) per the largest unit that divides its refill period, with a
// multiplier; a sub-second or odd period is described per second.
func describe(b tokenbucket.Limit) (rpu uint64, unit descriptors.Unit, mult uint32) {
	perPeriod := uint64((b.RefillAmount + tokenbucket.PerToken - 1) / tokenbucket.PerToken)
	for _, u := range describeUnits {
		d := u.Duration()
		if b.RefillPeriod >= d && b.RefillPeriod%d == 0 && b.RefillPeriod/d <= math.MaxUint32 {
			return perPeriod, u, uint32(b.RefillPeriod / d)
		}
	}
	perSecond := (float64(b.RefillAmount) / float64(tokenbucket.PerToken)) * float64(time.Second) / float64(b.RefillPeriod)
	return uint64(math.Ceil(perSecond)), descriptors.Second, 1
}
