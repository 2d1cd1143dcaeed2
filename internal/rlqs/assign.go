package rlqs

import (
	"context"
	"math"
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/sirupsen/logrus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dynalimit/dynalimit/internal/service"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// assign charges one report of w's bucket and returns the bucket's action:
//   - abandon, once the bucket has reported no demand for AbandonAfter;
//   - ALLOW_ALL when no rule limits it (no rule matches, an unlimited or
//     replaced rule, shadow mode), as ShouldRateLimit would answer OK;
//   - DENY_ALL for a limit of requests_per_unit 0;
//   - otherwise a token bucket: the stream's share of the tightest limit;
//   - nothing (nil) when the store failed before it knew the bucket's
//     limits: Envoy keeps its assignment until its TTL runs out.
func (st *streamState) assign(ctx context.Context, w *watch, u *usage, first bool, now time.Time) (*action, error) {
	o := &st.s.o
	allowed, dem := u.GetNumRequestsAllowed(), demandOf(u)
	elapsed := u.GetTimeElapsed().AsDuration()
	if !first {
		// Envoy counts time_elapsed in whole seconds, truncated: the
		// time since the stream's last report of the bucket is exact.
		elapsed = now.Sub(w.last)
	}
	rate := -1.0 // unknown
	if elapsed > 0 {
		rate = float64(dem) / elapsed.Seconds()
	}
	w.last = now
	if dem > 0 {
		w.active = now
	}
	if !first && dem == 0 && now.Sub(w.active) >= o.AbandonAfter {
		st.drop(w)
		return st.pushed(abandon(w.id), kindAbandon), nil
	}
	cfg := o.Config()
	if cfg == nil {
		return nil, status.Error(codes.Unavailable, "rlqs: no rate limit configuration loaded")
	}
	entries, ok := cfg.BucketEntries(st.domain, w.id.GetBucket())
	if !ok {
		return st.pushed(blanket(w.id, typev3.RateLimitStrategy_ALLOW_ALL, o.TTL), kindAllowAll), nil
	}
	q, err := o.Charger.ChargeQuota(ctx, st.domain, entries, allowed, dem)
	known := err == nil
	if err != nil {
		if status.Code(err) == codes.InvalidArgument {
			return nil, st.fail(codes.InvalidArgument, reasonInvalidBucket, status.Convert(err).Message())
		}
		if ctx.Err() != nil {
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		o.Observer.ChargeFailed()
		if q.Limits == nil && !q.Unlimited {
			// Nothing known of the bucket's limits: no action, so that
			// Envoy keeps its assignment until its TTL runs out.
			return nil, nil
		}
	}
	switch {
	case !q.Matched || q.Unlimited || q.Shadow:
		return st.pushed(blanket(w.id, typev3.RateLimitStrategy_ALLOW_ALL, o.TTL), kindAllowAll), nil
	case q.Deny:
		return st.pushed(blanket(w.id, typev3.RateLimitStrategy_DENY_ALL, o.TTL), kindDenyAll), nil
	}
	if known {
		o.Observer.OverAdmitted(overAdmitted(&q, allowed))
	}
	fleet, external := st.fleet(w, &q, now)
	d := demand{own: rate, fleet: fleet, others: othersUsed(&q, dem)}
	d.local, d.streams = st.s.shared.report(st.domain+"\x00"+w.key, w, rate)
	frac := fraction(d)
	o.Observer.Share(frac)
	g, r := shareOf(&q, frac, known, float64(allowed), external, o.TTL)
	g = w.steady(g)
	if o.Logger.Logger.IsLevelEnabled(logrus.DebugLevel) {
		o.Logger.WithFields(logrus.Fields{
			"bucket": w.key, "allowed": allowed, "demand": dem, "own": d.own, "local": d.local, "fleet": d.fleet,
			"others": d.others, "external": external, "fraction": frac, "rate": r,
			"tokens_per_fill": g.tokensPerFill, "fill_interval": g.fillInterval, "max_tokens": g.maxTokens,
		}).Debug("rlqs assignment")
	}
	return st.pushed(tokenBucket(w.id, g, o.TTL), kindTokenBucket), nil
}

// fleet reads the store's meters since this stream's last report of the
// bucket: the fleet's demand rate (what every replica charged to the
// demand meter, over the time in between), and for each limit the rate
// at which something other than quota reports consumed it (its fall, less
// what the allowed meter says the reports charged): ShouldRateLimit
// decisions, or other buckets on a shared parent level. Both are unknown
// (0, nil) until the stream has read the meters twice; a limit that may
// have been full in between tells nothing (0).
func (st *streamState) fleet(w *watch, q *service.Quota, now time.Time) (float64, []float64) {
	if !q.Metered {
		return 0, nil
	}
	var rate float64
	var external []float64
	if elapsed := now.Sub(w.meterAt); w.metered && elapsed > 0 {
		rate = service.DemandRate(tokenbucket.Millitokens(w.meter), q.Demand, elapsed)
		reported := service.DemandRate(tokenbucket.Millitokens(w.allowed), q.Allowed, elapsed)
		if len(w.remaining) == len(q.Limits) {
			external = make([]float64, len(q.Limits))
			for i, l := range q.Limits {
				external[i] = externalRate(l, w.remaining[i], elapsed, reported)
			}
		}
	}
	w.meter, w.allowed, w.meterAt, w.metered = int64(q.Demand), int64(q.Allowed), now, true
	w.remaining = w.remaining[:0]
	for _, l := range q.Limits {
		w.remaining = append(w.remaining, int64(l.Remaining))
	}
	return rate, external
}

// externalRate is the rate, in tokens per second, at which limit l was
// consumed by others than quota reports over elapsed since it held before:
// its refill less its rise, less what the reports charged (reported per
// second). It is 0 when the limit may have filled up in between (its fall
// is then unknown) or for a calendar budget.
func externalRate(l service.QuotaLimit, before int64, elapsed time.Duration, reported float64) float64 {
	b := l.Bucket
	if b.Validate() != nil || !b.Calendar.IsZero() {
		return 0
	}
	refill := float64(b.RefillAmount) * (float64(elapsed) / float64(b.RefillPeriod))
	if float64(before)+refill >= float64(b.Capacity) {
		return 0
	}
	consumed := (float64(before) + refill - float64(l.Remaining)) / float64(tokenbucket.PerToken) / elapsed.Seconds()
	return math.Max(consumed-reported, 0)
}

// steadyWithin is how far a new grant's rate may be from the last one's
// and the last one still be sent: Envoy 1.40 starts a changed token bucket
// with the tokens the old one held in proportion (rounded down to none
// unless it was full), so a grant that changes at every report loses its
// bucket's tokens each time.
const steadyWithin = 0.03

// steady returns the stream's last grant of the bucket when g's rate is
// within steadyWithin of it and its burst alike, and records g otherwise.
func (w *watch) steady(g grant) grant {
	last := w.grant
	if last.fillInterval > 0 && g.fillInterval > 0 {
		lr := float64(last.tokensPerFill) / last.fillInterval.Seconds()
		nr := float64(g.tokensPerFill) / g.fillInterval.Seconds()
		lb, nb := float64(last.maxTokens), float64(g.maxTokens)
		if math.Abs(nr-lr) <= steadyWithin*lr && math.Abs(nb-lb) <= steadyWithin*lb+1 {
			return last
		}
	}
	w.grant = g
	return g
}

// othersUsed reports whether the bucket's demand meter held demand
// before this report charged dem to it.
func othersUsed(q *service.Quota, dem uint64) bool {
	if !q.Metered {
		return false
	}
	before := float64(q.Demand) + float64(min(dem, service.MaxHits))*float64(tokenbucket.PerToken)
	return before < float64(tokenbucket.MaxMillitokens)
}

// overAdmitted is how many of a report's allowed requests the limits
// could not hold: the debt the charge left beyond what reporting explains
// (debtSlack), at most what it charged.
func overAdmitted(q *service.Quota, allowed uint64) float64 {
	over := 0.0
	for _, l := range q.Limits {
		if l.Bucket.Validate() != nil {
			continue
		}
		debt := -float64(l.Remaining)/float64(tokenbucket.PerToken) - debtSlack(l.Bucket)
		over = math.Max(over, math.Min(debt, float64(allowed)))
	}
	return over
}

// pushed counts an action of kind and returns it.
func (st *streamState) pushed(a *action, kind string) *action {
	st.s.o.Observer.Pushed(kind)
	return a
}
