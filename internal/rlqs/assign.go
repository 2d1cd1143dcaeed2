package rlqs

import (
	"context"
	"fmt"
	"math"
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/sirupsen/logrus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dynalimit/dynalimit/internal/service"
	"github.com/dynalimit/dynalimit/pkg/descriptors"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// assign takes one report of w's bucket into the bucket's pooled charge
// and returns the bucket's action:
//   - abandon, once the bucket has reported no demand for AbandonAfter;
//   - ALLOW_ALL when no rule limits it (no rule matches, an unlimited or
//     replaced rule, shadow mode), as ShouldRateLimit would answer OK;
//   - DENY_ALL for a limit of requests_per_unit 0;
//   - otherwise a token bucket: the stream's share of the tightest limit,
//     as the bucket's last charge left it;
//   - nothing (nil) when the store failed before it knew the bucket's
//     limits: Envoy keeps its assignment until its TTL runs out.
//
// The bucket's first report on this replica is charged at once, to learn
// its limits; the others wait for the pool's call, its delay later (see
// pool).
func (st *streamState) assign(ctx context.Context, w *watch, u *usage, first bool, now time.Time) (*action, error) {
	o := &st.s.o
	allowed, dem := u.GetNumRequestsAllowed(), demandOf(u)
	elapsed := u.GetTimeElapsed().AsDuration()
	if !first {
		// Envoy counts time_elapsed in whole seconds, truncated: the
		// time since the stream's last report of the bucket is exact.
		elapsed = now.Sub(w.last)
	}
	w.last = now
	if dem > 0 {
		w.active = now
	}
	if !first && dem == 0 && now.Sub(w.active) >= o.AbandonAfter {
		st.drop(ctx, w)
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
	v, err := st.take(ctx, w, entries, allowed, dem, elapsed)
	if err != nil {
		return nil, err
	}
	q := &v.q
	switch {
	case v.calls == 0 || (!v.known && q.Limits == nil && !q.Unlimited):
		// Nothing known of the bucket's limits: no action, so that Envoy
		// keeps its assignment until its TTL runs out.
		return nil, nil
	case !q.Matched || q.Unlimited || q.Shadow:
		return st.pushed(blanket(w.id, typev3.RateLimitStrategy_ALLOW_ALL, o.TTL), kindAllowAll), nil
	case q.Deny:
		return st.pushed(blanket(w.id, typev3.RateLimitStrategy_DENY_ALL, o.TTL), kindDenyAll), nil
	}
	g, frac, r := v.share(o.TTL)
	o.Observer.Share(frac)
	w.entry.mu.Lock()
	g = w.steady(g)
	w.entry.mu.Unlock()
	if o.Logger.Logger.IsLevelEnabled(logrus.DebugLevel) {
		o.Logger.WithFields(logrus.Fields{
			"stream": fmt.Sprintf("%p", st), "elapsed": elapsed, "bucket": w.key, "allowed": allowed, "demand": dem, "own": v.own, "local": v.local, "fleet": v.fleet,
			"others": v.others, "external": v.external, "fraction": frac, "rate": r,
			"tokens_per_fill": g.tokensPerFill, "fill_interval": g.fillInterval, "max_tokens": g.maxTokens,
		}).Debug("rlqs assignment")
	}
	return st.pushed(tokenBucket(w.id, g, o.TTL), kindTokenBucket), nil
}

// view is what a report's answer is computed from: the bucket's last
// charge, and the demand as this replica knows it now.
type view struct {
	demand
	q        service.Quota
	calls    int
	known    bool
	charged  float64
	external []float64
}

// share is the grant v's stream gets for ttl: its fraction of the
// bucket's limits, and the rate that fraction comes to.
func (v *view) share(ttl time.Duration) (grant, float64, float64) {
	frac := fraction(v.demand)
	g, r := shareOf(&v.q, frac, v.known, v.charged, v.external, ttl)
	return g, frac, r
}

// take adds a report of w's bucket (allowed of dem requests over elapsed)
// to its entry, charging the entry at once when it has never been, and
// returns what the answer is computed from; or the stream error the store
// refused the bucket with.
func (st *streamState) take(ctx context.Context, w *watch, entries []descriptors.Entry, allowed, dem uint64, elapsed time.Duration) (view, error) {
	e := w.entry
	e.mu.Lock()
	if elapsed > 0 {
		w.rate = float64(dem) / elapsed.Seconds()
	}
	e.entries = entries
	e.pending = satAdd(e.pending, allowed)
	st.s.pool.report(e, st.s.now())
	call := e.callFor(st.s.now())
	e.mu.Unlock()
	if call >= 0 {
		if err := st.s.pool.charge(ctx, e, call); err != nil {
			return view{}, st.fail(codes.InvalidArgument, reasonInvalidBucket, status.Convert(err).Message())
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.state.err; err != nil {
		return view{}, st.fail(codes.InvalidArgument, reasonInvalidBucket, status.Convert(err).Message())
	}
	return e.viewOf(w), nil
}

// viewOf is what w's answer is computed from now. e.mu held.
func (e *entry) viewOf(w *watch) view {
	s := &e.state
	v := view{q: s.q, calls: s.calls, known: s.known, charged: s.charged, external: s.external}
	v.own, v.local, v.streams, v.others = w.rate, e.localRate(), len(e.members), s.others
	if rest := s.fleet - s.mine; s.q.Metered && rest > 1e-3 {
		// The fleet's demand as the last call read it, with this
		// replica's part as it is now. (When the rest is nobody's rate
		// but others use the bucket, the fleet is unknown: see fraction.)
		v.fleet = rest + v.local
	}
	return v
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
