package service

import (
	"context"
	"errors"
	"math"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/descriptors"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// DemandLimits are the names of the three demand meters that ChargeQuota
// keeps in a descriptor's own bucket item beside its limits: buckets of
// tokenbucket.MaxMillitokens that refill one token a minute. They hold
// levels, not flows: each replica keeps its demand rate charged to the
// meter of the current epoch (and refunds it from the last epoch's when
// it moves on), and resets the next epoch's meter to full, so that the
// deficits of the current and the last meters add up to the fleet's
// demand rate, a replica that stopped counting until the epoch after its
// last write has passed (see internal/rlqs).
// Their names cannot be a configured limit's: those never start with '~'.
var DemandLimits = [3]string{"~rlqs.demand.0", "~rlqs.demand.1", "~rlqs.demand.2"}

// MeterReset is the QuotaCharge demand adjustment that refunds a meter to
// full.
const MeterReset = math.MinInt64

// AllowedLimit is the name of the allowed meter, the demand meters' twin charged
// the requests quota reports said were allowed: with it a reader tells the
// consumption of a limit by quota reports from the rest (ShouldRateLimit
// decisions, and other buckets on a parent level).
const AllowedLimit = "~rlqs.allowed"

// DemandMeter is the demand meter's shape.
var DemandMeter = tokenbucket.Limit{Capacity: tokenbucket.MaxMillitokens, RefillAmount: tokenbucket.PerToken, RefillPeriod: time.Minute}

// Meter resets: a meter this far below full (2^40 millitokens, about 10^9
// requests past its refill) is credited meterRefund by a second store call,
// so that its time to full, which stores turn into an expiry, stays within
// what they hold (Redis takes at most 10^14 ms as an integer; this is
// 6.6·10^13). At 10,000 requests a second that is one extra call every 30
// hours.
const (
	meterFloor  = tokenbucket.MaxMillitokens - 1<<40
	meterRefund = tokenbucket.Millitokens(1) << 39
)

// Quota is what ChargeQuota learnt of one quota bucket.
type Quota struct {
	// Matched: a rule matched the bucket's entries (and its namespace is
	// not deleted).
	Matched bool
	// Unlimited: nothing limits the bucket (an unlimited rule, a rule
	// another replaces, or no rule at all when Matched is false).
	Unlimited bool
	// Deny: a limit of requests_per_unit 0 refuses every request.
	Deny bool
	// Shadow: the rule (or the service) is in shadow mode, and never
	// refuses.
	Shadow bool
	// Limits are the bucket's limits: every limit of the matched rule and
	// of every level of its hierarchy, in tier order.
	Limits []QuotaLimit
	// Demand are the levels of the demand meters, and Allowed the allowed
	// meter's, after the charge (see DemandLimits, AllowedLimit), when
	// Metered.
	Demand  [3]tokenbucket.Millitokens
	Allowed tokenbucket.Millitokens
	Metered bool
}

// QuotaCharge is what one ChargeQuota call charges a quota bucket.
type QuotaCharge struct {
	// Allowed is the requests Envoy admitted, charged to the bucket's
	// limits and to the allowed meter.
	Allowed uint64
	// Demand adjusts each demand meter, in millitokens: charged when
	// positive, refunded when negative, refunded to full for MeterReset,
	// read for 0.
	Demand [3]int64
}

// QuotaLimit is one limit a quota bucket is charged to.
type QuotaLimit struct {
	// Key and Name place it: its bucket item and its name there.
	Key  cascade.Key
	Name string
	// Bucket is the limit the store applied.
	Bucket tokenbucket.Limit
	// Remaining is what the bucket holds after the charge (negative in
	// debt); valid when the store answered.
	Remaining tokenbucket.Millitokens
	// Depth is the limit's level in the hierarchy (0: the bucket's own).
	Depth int
}

// ChargeQuota charges quota reports of a bucket whose entries are entries
// in domain: c.Allowed requests are charged (debited even past zero:
// Envoy already admitted them) to every limit that a ShouldRateLimit
// request with those entries would debit, the same bucket items, tiers,
// stored ancestors and namespaces, and c.Demand adjusts the bucket's
// demand meters, all in one plan: one store call. A charge with nothing
// allowed checks the limits without debiting them.
//
// It returns the bucket's limits with what remains of each. A store
// failure returns the limits (without what remains) and the error.
// InvalidArgument errors name a malformed bucket (an entry past the
// request limits, an empty entity) or a priced domain, which quota reports
// cannot cost.
func (s *Service) ChargeQuota(ctx context.Context, domain string, entries []descriptors.Entry, c QuotaCharge) (Quota, error) {
	cfg := s.config()
	if cfg == nil {
		return Quota{}, status.Error(codes.Unavailable, "service: no rate limit configuration loaded")
	}
	if cfg.Prices(domain) != nil {
		return Quota{}, status.Error(codes.InvalidArgument, "service: domain "+domain+" has prices; quota reports carry no token counts")
	}
	req := quotaRequest(domain, entries, c.Allowed)
	items, err := s.parse(req)
	if err != nil {
		return Quota{}, s.refuse(err)
	}
	if err := s.resolve(cfg, req, items); err != nil {
		return Quota{}, s.refuse(err)
	}
	if err := s.tiers(domain, items); err != nil {
		return Quota{}, s.refuse(err)
	}
	it := &items[0]
	q := Quota{Matched: it.rule.matched, Unlimited: !it.applies(), Shadow: s.shadow || it.shadowed()}
	if q.Unlimited {
		return q, nil
	}
	if err := s.ancestors(ctx, items); err != nil {
		return q, err
	}
	plan, _ := s.plan(items)
	for i := range plan.Debits {
		d := &plan.Debits[i]
		d.Role = cascade.Advisory // charged whatever it finds
		if d.Amount > 0 {
			d.Op = cascade.Charge
		}
	}
	q.Limits = quotaLimits(it, &plan, &q)
	if len(plan.Debits) == 0 {
		return q, nil
	}
	key := it.rule.tiers[0].key
	for i, name := range DemandLimits {
		plan.Debits = append(plan.Debits, levelDebit(key, name, c.Demand[i]))
	}
	plan.Debits = append(plan.Debits, meterDebit(key, AllowedLimit, c.Allowed))
	return s.acquireQuota(ctx, &plan, q)
}

// acquireQuota has the store decide plan, whose last four debits are the
// demand and allowed meters', and reads what remains into q.
func (s *Service) acquireQuota(ctx context.Context, plan *cascade.Plan, q Quota) (Quota, error) {
	dec, err := s.store.Acquire(ctx, plan)
	if err == nil && len(dec.Statuses) != len(plan.Debits) {
		err = errStatuses
	}
	if errors.Is(err, cascade.ErrInvalid) {
		return q, status.Error(codes.InvalidArgument, "service: "+err.Error())
	}
	if err != nil {
		return q, err
	}
	for i := range q.Limits {
		st := &dec.Statuses[i]
		q.Limits[i].Remaining = st.Remaining
		if st.Bucket.Validate() == nil {
			q.Limits[i].Bucket = st.Bucket
		}
	}
	n := len(dec.Statuses)
	for i := range q.Demand {
		q.Demand[i] = dec.Statuses[n-4+i].Remaining
	}
	q.Allowed, q.Metered = dec.Statuses[n-1].Remaining, true
	s.resetMeters(ctx, plan.Debits[n-1:], q.Allowed)
	return q, nil
}

// resetMeters credits the meters of debits (the allowed meter) found below
// meterFloor, in one store call.
func (s *Service) resetMeters(ctx context.Context, debits []cascade.Debit, levels ...tokenbucket.Millitokens) {
	var p cascade.Plan
	for i, l := range levels {
		if l < meterFloor {
			d := debits[i]
			d.Op, d.Amount = cascade.Refund, meterRefund
			p.Debits = append(p.Debits, d)
		}
	}
	if len(p.Debits) == 0 {
		return
	}
	if _, err := s.store.Acquire(ctx, &p); err != nil {
		s.log.WithError(err).Warn("rlqs meters: reset failed")
	}
}

// quotaRequest is the ShouldRateLimit request a quota bucket stands for:
// one descriptor of its entries, with the allowed requests as its own
// hits_addend.
func quotaRequest(domain string, entries []descriptors.Entry, allowed uint64) *pb.RateLimitRequest {
	es := make([]*rlv3.RateLimitDescriptor_Entry, len(entries))
	for i, e := range entries {
		es[i] = &rlv3.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value}
	}
	return &pb.RateLimitRequest{
		Domain:      domain,
		Descriptors: []*rlv3.RateLimitDescriptor{{Entries: es, HitsAddend: wrapperspb.UInt64(allowed)}},
	}
}

// quotaLimits lists the limits of item it in plan order, and marks q Deny
// when one of them denies everything. Deny limits have no debit.
func quotaLimits(it *item, plan *cascade.Plan, q *Quota) []QuotaLimit {
	out := make([]QuotaLimit, 0, len(plan.Debits))
	for ti := range it.rule.tiers {
		t := &it.rule.tiers[ti]
		for li := range t.limits {
			l := &t.limits[li]
			if l.Deny {
				q.Deny = true
				continue
			}
			out = append(out, QuotaLimit{Key: t.key, Name: l.ID, Bucket: l.Bucket, Depth: t.depth})
		}
	}
	return out
}

// meterDebit charges n requests to the meter name of the bucket item key
// (a check when n is 0).
func meterDebit(key cascade.Key, name string, n uint64) cascade.Debit {
	d := cascade.Debit{Key: key, Limit: name, Bucket: DemandMeter, Op: cascade.Check, Role: cascade.Advisory}
	if n > 0 {
		d.Op, d.Amount = cascade.Charge, tokenbucket.Millitokens(min(n, MaxHits))*tokenbucket.PerToken
	}
	return d
}

// levelDebit adjusts the demand meter name of the bucket item key by adj
// millitokens (see QuotaCharge.Demand).
func levelDebit(key cascade.Key, name string, adj int64) cascade.Debit {
	d := cascade.Debit{Key: key, Limit: name, Bucket: DemandMeter, Op: cascade.Check, Role: cascade.Advisory}
	switch {
	case adj == MeterReset:
		d.Op, d.Amount = cascade.Refund, tokenbucket.MaxMillitokens
	case adj > 0:
		d.Op, d.Amount = cascade.Charge, tokenbucket.Millitokens(min(adj, int64(tokenbucket.MaxMillitokens)))
	case adj < 0:
		d.Op, d.Amount = cascade.Refund, tokenbucket.Millitokens(min(-adj, int64(tokenbucket.MaxMillitokens)))
	}
	return d
}

// DemandRate is the rate of demand, in requests per second, between two
// levels of a demand meter read elapsed apart: what every report charged
// to it in between, from every replica, the meter's refill added back (as
// much of it as the meter had room for). It is 0 when elapsed is not
// positive, or when the meter rose by more than its refill (a reset, or a
// store that lost it): unknown.
func DemandRate(before, after tokenbucket.Millitokens, elapsed time.Duration) float64 {
	if elapsed <= 0 {
		return 0
	}
	// Integers: levels near 2^60 are past a float64's exact range.
	refill := tokenbucket.Millitokens(float64(DemandMeter.RefillAmount) * (float64(elapsed) / float64(DemandMeter.RefillPeriod)))
	refill = min(refill, DemandMeter.Capacity-before)
	fell := before - after + refill
	if fell < 0 {
		return 0
	}
	return float64(fell) / float64(tokenbucket.PerToken) / elapsed.Seconds()
}
