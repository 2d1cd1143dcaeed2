package service

import (
	"math"
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/dynalimit/dynalimit/pkg/descriptors"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// respond builds the response from the decided items.
func (s *Service) respond(req *pb.RateLimitRequest, items []item, over, decided bool) *pb.RateLimitResponse {
	n := len(items)
	var resp *pb.RateLimitResponse
	var slots []respSlot
	if n == 1 {
		// The common request, one descriptor: one allocation holds the
		// response, its status list and the status with its limit and reset.
		one := &oneResponse{}
		resp, slots = &one.resp, one.slot[:]
		resp.Statuses = one.statuses[:]
	} else {
		// One allocation holds every status with its limit and reset.
		resp = &pb.RateLimitResponse{}
		slots = make([]respSlot, n)
		resp.Statuses = make([]*pb.RateLimitResponse_DescriptorStatus, n)
	}
	resp.OverallCode = pb.RateLimitResponse_OK
	if over {
		resp.OverallCode = pb.RateLimitResponse_OVER_LIMIT
	}
	best := -1 // the most restrictive descriptor, for headers
	for i := range items {
		it := &items[i]
		r, d := &it.rule, &it.decided
		slot := &slots[i]
		st := &slot.status
		resp.Statuses[i] = st
		st.Code = pb.RateLimitResponse_OK
		if r.unlimited && !r.replaced {
			st.LimitRemaining = math.MaxUint32
			continue
		}
		if !it.applies() || d.worst < 0 {
			continue
		}
		l := it.worstLimit()
		cl := &slot.limit
		cl.Name = l.Name
		rpu, unit, mult := l.RequestsPerUnit, l.Unit, l.UnitMultiplier
		if d.bucket != (tokenbucket.Limit{}) && d.bucket != l.Bucket {
			rpu, unit, mult = describe(d.bucket) // the store applied a stored override
		}
		cl.RequestsPerUnit = uint32(min(rpu, math.MaxUint32))
		cl.Unit = pb.RateLimitResponse_RateLimit_Unit(unit)
		if mult > 1 {
			cl.UnitMultiplier = wrapperspb.UInt32(mult)
		}
		st.CurrentLimit = cl
		if d.refused && !it.shadowed() {
			st.Code = pb.RateLimitResponse_OVER_LIMIT
		}
		st.LimitRemaining = uint32(min(d.remain, math.MaxUint32))
		if decided {
			du := &slot.reset
			du.Seconds = int64(d.reset / time.Second)
			du.Nanos = int32(d.reset % time.Second)
			st.DurationUntilReset = du
		}
		if decided && s.headers && restricts(items, i, best) {
			best = i
		}
	}
	if best >= 0 {
		resp.ResponseHeadersToAdd = s.headerValues(&items[best], resp.Statuses[best])
	}
	if s.dynamicMetadata {
		resp.DynamicMetadata = metadata(req, items, resp.Statuses, s.extendedMetadata)
		if b := budgetValue(items); b != nil {
			resp.DynamicMetadata.Fields[BudgetKey] = b
		}
	}
	return resp
}

// BudgetKey is the field of the response's dynamic metadata (when enabled)
// that holds the most restrictive budget or money limit of the request, in
// its own unit:
// its name, total and remaining (dollars as decimal strings for a money
// limit), unit (usd or tokens) and period.
const BudgetKey = "dynalimit.budget"

// budgetValue describes the most restrictive decided limit that is a
// calendar budget or in money, nil when none is.
func budgetValue(items []item) *structpb.Value {
	best := -1
	for i := range items {
		it := &items[i]
		if !it.applies() || it.decided.worst < 0 {
			continue
		}
		if l := it.worstLimit(); (l.IsBudget() || l.Money) && restricts(items, i, best) {
			best = i
		}
	}
	if best < 0 {
		return nil
	}
	it := &items[best]
	l := it.worstLimit()
	unit, period := "tokens", l.Unit.String()
	if l.Money {
		unit = "usd"
	}
	if l.IsBudget() {
		period = l.Bucket.Calendar.String()
	}
	return structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
		"limit":     structpb.NewStringValue(l.ID),
		"total":     structpb.NewStringValue(l.Amount(int64(l.RequestsPerUnit))),
		"remaining": structpb.NewStringValue(l.Amount(it.decided.remain)),
		"unit":      structpb.NewStringValue(unit),
		"period":    structpb.NewStringValue(period),
	}})
}

// LocalKey is the field of the response's dynamic metadata, true, that
// says the decision was made on this replica's share of the limits because
// the shared store could not make it in time (ON_UNAVAILABLE=local).
const LocalKey = "dynalimit.local"

// markLocal says in resp's dynamic metadata that it was decided locally.
func markLocal(resp *pb.RateLimitResponse) {
	if resp.DynamicMetadata == nil {
		resp.DynamicMetadata = &structpb.Struct{Fields: make(map[string]*structpb.Value, 1)}
	}
	resp.DynamicMetadata.Fields[LocalKey] = structpb.NewBoolValue(true)
}

// oneResponse is the response to a one-descriptor request in one piece.
type oneResponse struct {
	resp     pb.RateLimitResponse
	statuses [1]*pb.RateLimitResponse_DescriptorStatus
	slot     [1]respSlot
}

// respSlot holds one descriptor's status and what it points to.
type respSlot struct {
	status pb.RateLimitResponse_DescriptorStatus
	limit  pb.RateLimitResponse_RateLimit
	reset  durationpb.Duration
}

// restricts reports whether item i is more restrictive than item best for
// the headers: an enforced refusal first, then the fewest remaining tokens.
func restricts(items []item, i, best int) bool {
	if best < 0 {
		return true
	}
	a, b := &items[i], &items[best]
	ae, be := a.enforcedRefusal(), b.enforcedRefusal()
	if ae != be {
		return ae
	}
	return a.decided.remain < b.decided.remain
}

// headerValues formats the RateLimit-* headers from one descriptor's status
// as envoyproxy/ratelimit does; the reset is whole seconds, rounded up: the
// retry-after when refused, the time until the bucket is full otherwise.
func (s *Service) headerValues(it *item, st *pb.RateLimitResponse_DescriptorStatus) []*corev3.HeaderValue {
	reset := it.decided.reset
	if it.decided.refused {
		reset = it.decided.retry
	}
	hv := make([]corev3.HeaderValue, 3)
	hv[0].Key, hv[0].Value = s.limitHeader, strconv.FormatUint(uint64(st.GetCurrentLimit().GetRequestsPerUnit()), 10)
	hv[1].Key, hv[1].Value = s.remainingHeader, strconv.FormatUint(uint64(st.GetLimitRemaining()), 10)
	if l := it.worstLimit(); l.Money {
		// In dollars, exactly: the status's fields are 32-bit counts.
		hv[0].Value = descriptors.FormatUSD(int64(l.RequestsPerUnit))
		hv[1].Value = descriptors.FormatUSD(it.decided.remain)
	}
	hv[2].Key, hv[2].Value = s.resetHeader, strconv.FormatInt(ceilSeconds(reset), 10)
	return []*corev3.HeaderValue{&hv[0], &hv[1], &hv[2]}
}

// ceilSeconds returns d in whole seconds rounded up, never negative. It
// cannot overflow: the largest Duration is about 9.2·10⁹ seconds.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	secs := int64(d / time.Second)
	if d%time.Second != 0 {
		secs++
	}
	return secs
}

// describeUnits are the units describe tries, largest first.
var describeUnits = [...]descriptors.Unit{descriptors.Year, descriptors.Month, descriptors.Week, descriptors.Day, descriptors.Hour, descriptors.Minute, descriptors.Second}

// describe expresses a bucket limit as Envoy's rate limit: whole requests
// (rounded up) per the largest unit that divides its refill period, with a
// multiplier; a sub-second or odd period is described per second.
//
// A calendar budget is its total per period.
func describe(b tokenbucket.Limit) (rpu uint64, unit descriptors.Unit, mult uint32) {
	if !b.Calendar.IsZero() {
		return uint64((b.Capacity + tokenbucket.PerToken - 1) / tokenbucket.PerToken), descriptors.PeriodUnit(b.Calendar.Period()), 1
	}
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
