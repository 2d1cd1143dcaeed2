package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// Store is what the suite exercises: the store contract of internal/service.
// Implementations must be safe for concurrent use.
type Store interface {
	Acquire(ctx context.Context, p *cascade.Plan) (cascade.Decision, error)
}

// Factory returns a fresh, empty store that reads the time from clock.Now.
// It may register cleanups with t. Subtests reuse the same keys, so a store
// over a shared backend needs a table of its own per call (or a wrapper that
// gives each call its own namespace prefix).
type Factory func(t *testing.T, clock *Clock) Store

// Epoch is the instant at which every Run subtest starts its Clock: a whole
// unix millisecond, so offsets in the tables are exact.
var Epoch = time.Date(2026, time.March, 1, 12, 0, 0, 0, time.UTC)

// Run runs every behaviour test against stores made by f, one named subtest
// per behaviour, each on a fresh store and a fixed Clock starting at Epoch.
// Options adjust it for slow stores (WithMaxCalls).
func Run(t *testing.T, f Factory, opts ...Option) {
	t.Helper()
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	for _, bt := range behaviours() {
		t.Run(bt.name, func(t *testing.T) {
			clock := NewClock(Epoch)
			s := f(t, clock)
			if s == nil {
				t.Fatalf("storetest: factory returned a nil store")
			}
			runSteps(t, s, clock, bt.steps)
		})
	}
	t.Run("distinct_keys", func(t *testing.T) { testDistinctKeys(t, f) })
	t.Run("empty_plan", func(t *testing.T) { testEmptyPlan(t, f) })
	t.Run("canceled_context", func(t *testing.T) { testCanceled(t, f) })
	t.Run("plan_not_modified", func(t *testing.T) { testPlanNotModified(t, f) })
	t.Run("every_millisecond", func(t *testing.T) { testEveryMillisecond(t, f, &o) })
	t.Run("any_time_split", func(t *testing.T) { testAnyTimeSplit(t, f, &o) })
	t.Run("idle_month", func(t *testing.T) { testIdleMonth(t, f) })
	t.Run("quota_report", func(t *testing.T) { testQuotaReport(t, f) })
}

// step is one Acquire at Epoch+at with its exact expected decision.
type step struct {
	at    time.Duration
	plan  []cascade.Debit
	want  cascade.Decision
	loose bool // compare Admitted, OK and Remaining only
}

type behaviour struct {
	name  string
	steps []step
}

func runSteps(t *testing.T, s Store, clock *Clock, steps []step) {
	t.Helper()
	if err := checkSteps(s, clock, steps); err != nil {
		t.Fatal(err)
	}
}

// checkSteps runs steps in order and returns the first mismatch.
func checkSteps(s Store, clock *Clock, steps []step) error {
	for i, st := range steps {
		clock.Set(Epoch.Add(st.at))
		p := &cascade.Plan{Debits: st.plan}
		got, err := s.Acquire(context.Background(), p)
		if err != nil {
			return fmt.Errorf("step %d at +%v: Acquire(%s) error = %w, want nil", i, st.at, describe(p), err)
		}
		if !sameDecision(p, got, st.want, st.loose) {
			return fmt.Errorf("step %d at +%v: Acquire(%s) = %s, want %s", i, st.at, describe(p), format(got), format(st.want))
		}
	}
	return nil
}

// sameDecision compares a decision on plan p with the one wanted. Every
// status must report the debit's own limit as the one applied (the suite
// stores no overrides); the tables leave Bucket out.
func sameDecision(p *cascade.Plan, got, want cascade.Decision, loose bool) bool {
	if got.Admitted != want.Admitted || len(got.Statuses) != len(want.Statuses) || len(got.Statuses) != len(p.Debits) {
		return false
	}
	for i := range got.Statuses {
		g, w := got.Statuses[i], want.Statuses[i]
		if g.Bucket != p.Debits[i].Bucket {
			return false
		}
		g.Bucket, w.Bucket = tokenbucket.Limit{}, tokenbucket.Limit{}
		if loose {
			g.RetryAfter, g.ResetAfter, w.RetryAfter, w.ResetAfter = 0, 0, 0, 0
		}
		if g != w {
			return false
		}
	}
	return true
}

// Limits used by the tables. Rates are chosen so that expected values can be
// worked out by hand: l3 refills 3 mt/ms, lFive 5 mt/ms, lTwo 2 mt/ms, lOne
// 1 mt/ms, lThird 1 mt every 3 ms, lTPM 100 mt/ms.
var (
	l3      = limit(3000, 3000, time.Second)
	lFive   = limit(5000, 5000, time.Second)
	lTwo    = limit(2000, 2000, time.Second)
	lOne    = limit(1000, 1000, time.Second)
	lThird  = limit(1000, 1000, 3*time.Second)
	lTPM    = limit(100_000, 100_000, time.Second)
	lMinute = limit(1000, 1000, time.Minute)
	// lDay grants 3 tokens per UTC day, carrying debt; lDayForgive forgives
	// it. Epoch is noon: the next day starts 12 hours later.
	lDay        = budget(3000, tokenbucket.Daily, true)
	lDayForgive = budget(3000, tokenbucket.Daily, false)
)

func budget(total tokenbucket.Millitokens, p tokenbucket.Period, carry bool) tokenbucket.Limit {
	c, err := tokenbucket.NewCalendar(p, "UTC")
	if err != nil {
		panic(err)
	}
	l, err := tokenbucket.Budget(total, c, carry)
	if err != nil {
		panic(err)
	}
	return l
}

func limit(capacity, refill tokenbucket.Millitokens, period time.Duration) tokenbucket.Limit {
	return tokenbucket.Limit{Capacity: capacity, RefillAmount: refill, RefillPeriod: period}
}

const tok = tokenbucket.PerToken

func key(entity string) cascade.Key {
	return cascade.Key{Namespace: "default", Entity: entity, Resource: "api"}
}

func debit(k cascade.Key, limit string, l tokenbucket.Limit, op cascade.Op, n tokenbucket.Millitokens) cascade.Debit {
	return cascade.Debit{Key: k, Limit: limit, Bucket: l, Amount: n, Op: op}
}

// consume, check, charge and refund build Enforce debits on limit "rpm" of
// the bucket item key(entity).
func consume(entity string, l tokenbucket.Limit, n tokenbucket.Millitokens) cascade.Debit {
	return debit(key(entity), "rpm", l, cascade.Consume, n)
}

func check(entity string, l tokenbucket.Limit) cascade.Debit {
	return debit(key(entity), "rpm", l, cascade.Check, 0)
}

func charge(entity string, l tokenbucket.Limit, n tokenbucket.Millitokens) cascade.Debit {
	return debit(key(entity), "rpm", l, cascade.Charge, n)
}

func refund(entity string, l tokenbucket.Limit, n tokenbucket.Millitokens) cascade.Debit {
	return debit(key(entity), "rpm", l, cascade.Refund, n)
}

func named(d cascade.Debit, limit string) cascade.Debit { d.Limit = limit; return d }
func advisory(d cascade.Debit) cascade.Debit            { d.Role = cascade.Advisory; return d }
func quota(d cascade.Debit) cascade.Debit               { d.Role = cascade.Quota; return d }

func plan(d ...cascade.Debit) []cascade.Debit { return d }

// chain is a plan of one descriptor's tiers: d[0] its own bucket, then its
// ancestors, nearest first, each at its depth.
func chain(d ...cascade.Debit) []cascade.Debit {
	for i := range d {
		d[i].Depth = uint8(i)
	}
	return d
}

// ok is an admitted debit's status; no a refused one's.
func ok(rem tokenbucket.Millitokens, reset time.Duration) cascade.Status {
	return cascade.Status{OK: true, Remaining: rem, ResetAfter: reset}
}

func no(rem tokenbucket.Millitokens, retry, reset time.Duration) cascade.Status {
	return cascade.Status{Remaining: rem, RetryAfter: retry, ResetAfter: reset}
}

func admitted(s ...cascade.Status) cascade.Decision {
	return cascade.Decision{Admitted: true, Statuses: s}
}

func refused(s ...cascade.Status) cascade.Decision {
	return cascade.Decision{Admitted: false, Statuses: s}
}

const ms = time.Millisecond

func behaviours() []behaviour { //nolint:funlen // a table of cases
	return []behaviour{
		{"new_bucket_starts_full", []step{
			{at: 0, plan: plan(check("a", l3)), want: admitted(ok(3000, 0))},
			{at: 0, plan: plan(consume("a", l3, tok)), want: admitted(ok(2000, 334*ms))},
			{at: 0, plan: plan(consume("b", l3, 3*tok)), want: admitted(ok(0, 1000*ms))},
			{at: 5 * ms, plan: plan(check("c", lOne)), want: admitted(ok(1000, 0))},
		}},
		{"consume_to_empty_then_refused", []step{
			{at: 0, plan: plan(consume("a", l3, tok)), want: admitted(ok(2000, 334*ms))},
			{at: 0, plan: plan(consume("a", l3, tok)), want: admitted(ok(1000, 667*ms))},
			{at: 0, plan: plan(consume("a", l3, tok)), want: admitted(ok(0, 1000*ms))},
			// deficit 1000 mt at 3 mt/ms: ⌊1000/3⌋+1 = 334 ms.
			{at: 0, plan: plan(consume("a", l3, tok)), want: refused(no(0, 334*ms, 1000*ms))},
			{at: 0, plan: plan(consume("a", l3, 2*tok)), want: refused(no(0, 667*ms, 1000*ms))},
			// more than the capacity: never admitted, the wait is still exact.
			{at: 0, plan: plan(consume("a", l3, 4*tok)), want: refused(no(0, 1334*ms, 1000*ms))},
			{at: 0, plan: plan(consume("b", l3, 4*tok)), want: refused(no(3000, 334*ms, 0))},
			// deficit·rp/ra whole: exactly 1000·1000/1000 = 1000 ms.
			{at: 0, plan: plan(consume("c", lOne, tok)), want: admitted(ok(0, 1000*ms))},
			{at: 0, plan: plan(consume("c", lOne, tok)), want: refused(no(0, 1000*ms, 1000*ms))},
		}},
		{"refill", []step{
			{at: 0, plan: plan(consume("a", l3, 3*tok)), want: admitted(ok(0, 1000*ms))},
			{at: 100 * ms, plan: plan(check("a", l3)), want: admitted(ok(300, 900*ms))},
			{at: 100 * ms, plan: plan(consume("a", l3, tok)), want: refused(no(300, 234*ms, 900*ms))},
			{at: 334 * ms, plan: plan(consume("a", l3, tok)), want: admitted(ok(2, 1000*ms))},
			// the same millisecond again: no second credit.
			{at: 334 * ms, plan: plan(check("a", l3)), want: admitted(ok(2, 1000*ms))},
			{at: 335 * ms, plan: plan(check("a", l3)), want: admitted(ok(5, 999*ms))},
			// the clock goes backwards: nothing credited; the bucket holds
			// what it held at +300ms (less than nothing: 5 − 35·3)...
			{at: 300 * ms, plan: plan(check("a", l3)), want: refused(no(-100, 34*ms, 1034*ms))},
			// ...and nothing credited for coming back either.
			{at: 335 * ms, plan: plan(check("a", l3)), want: admitted(ok(5, 999*ms))},
			{at: 336 * ms, plan: plan(check("a", l3)), want: admitted(ok(8, 998*ms))},
			{at: 2 * time.Second, plan: plan(check("a", l3)), want: admitted(ok(3000, 0))},
			// a third of a millitoken per ms: reported in whole millitokens
			// (rounded down), the fractions kept, however often the bucket
			// is read. A millitoken is there once three ms have passed.
			{at: 0, plan: plan(consume("b", lThird, tok)), want: admitted(ok(0, 3000*ms))},
			{at: 0, plan: plan(consume("b", lThird, 1)), want: refused(no(0, 3*ms, 3000*ms))},
			{at: 1 * ms, plan: plan(consume("b", lThird, 1)), want: refused(no(0, 2*ms, 2999*ms))},
			{at: 2 * ms, plan: plan(consume("b", lThird, 1)), want: refused(no(0, 1*ms, 2998*ms))},
			{at: 2 * ms, plan: plan(check("b", lThird)), want: admitted(ok(0, 2998*ms))},
			{at: 3 * ms, plan: plan(check("b", lThird)), want: admitted(ok(1, 2997*ms))},
			{at: 3 * ms, plan: plan(consume("b", lThird, 1)), want: admitted(ok(0, 3000*ms))},
			{at: 4 * ms, plan: plan(check("b", lThird)), want: admitted(ok(0, 2999*ms))},
			{at: 5 * ms, plan: plan(consume("b", lThird, 1)), want: refused(no(0, 1*ms, 2998*ms))},
			{at: 6 * ms, plan: plan(check("b", lThird)), want: admitted(ok(1, 2997*ms))},
		}},
		{"all_or_nothing", []step{
			{at: 0, plan: plan(consume("b", l3, 3*tok)), want: admitted(ok(0, 1000*ms))},
			{at: 0, plan: plan(consume("a", l3, tok), consume("b", l3, tok)),
				want: refused(ok(3000, 0), no(0, 334*ms, 1000*ms))},
			{at: 0, plan: plan(consume("b", l3, tok), consume("a", l3, tok)),
				want: refused(no(0, 334*ms, 1000*ms), ok(3000, 0))},
			{at: 0, plan: plan(consume("a", l3, tok), consume("c", lOne, tok), consume("b", l3, tok)),
				want: refused(ok(3000, 0), ok(1000, 0), no(0, 334*ms, 1000*ms))},
			// the other buckets kept every token.
			{at: 0, plan: plan(check("a", l3), check("c", lOne)), want: admitted(ok(3000, 0), ok(1000, 0))},
			{at: 0, plan: plan(consume("a", l3, tok), consume("c", lOne, tok)), want: admitted(ok(2000, 334*ms), ok(0, 1000*ms))},
		}},
		{"three_level_chain", []step{
			// key → project → tenant, as the service plans a cascading
			// descriptor: two keys under one project and one tenant of 2.
			{at: 0, plan: chain(consume("k1", l3, tok), consume("p1", lFive, tok), consume("t1", lTwo, tok)),
				want: admitted(ok(2000, 334*ms), ok(4000, 200*ms), ok(1000, 500*ms))},
			{at: 0, plan: chain(consume("k2", l3, tok), consume("p1", lFive, tok), consume("t1", lTwo, tok)),
				want: admitted(ok(2000, 334*ms), ok(3000, 400*ms), ok(0, 1000*ms))},
			// the tenant refuses the third: nothing is debited at any level.
			{at: 0, plan: chain(consume("k3", l3, tok), consume("p1", lFive, tok), consume("t1", lTwo, tok)),
				want: refused(ok(3000, 0), ok(3000, 400*ms), no(0, 500*ms, 1000*ms))},
			{at: 0, plan: plan(check("k3", l3), check("p1", lFive)), want: admitted(ok(3000, 0), ok(3000, 400*ms))},
			// the key's own limit refuses first: its parents keep their tokens.
			{at: 500 * ms, plan: chain(consume("k1", l3, 4*tok), consume("p1", lFive, 4*tok), consume("t1", lTwo, tok)),
				want: refused(no(3000, 334*ms, 0), ok(5000, 0), ok(1000, 500*ms))},
			{at: 500 * ms, plan: chain(consume("k1", l3, tok), consume("p1", lFive, tok), consume("t1", lTwo, tok)),
				want: admitted(ok(2000, 334*ms), ok(4000, 200*ms), ok(0, 1000*ms))},
			// a post-response charge lands at every level, into debt.
			{at: 500 * ms, plan: chain(charge("k2", l3, 2*tok), charge("p1", lFive, 2*tok), charge("t1", lTwo, 2*tok)),
				want: refused(ok(1000, 667*ms), ok(2000, 600*ms), no(-2000, 2000*ms, 2000*ms))},
			{at: 500 * ms, plan: plan(check("k2", l3), check("p1", lFive), check("t1", lTwo)),
				want: refused(ok(1000, 667*ms), ok(2000, 600*ms), no(-2000, 1000*ms, 2000*ms))},
		}},
		{"same_limit_twice", []step{
			// decided in order: the second debit sees the first.
			{at: 0, plan: plan(consume("a", l3, tok), consume("a", l3, tok)),
				want: admitted(ok(1000, 667*ms), ok(1000, 667*ms))},
			{at: 0, plan: plan(consume("a", l3, tok), consume("a", l3, tok)),
				want: refused(ok(1000, 667*ms), no(1000, 0, 667*ms)), loose: true},
			{at: 0, plan: plan(check("a", l3)), want: admitted(ok(1000, 667*ms))},
			{at: 0, plan: plan(consume("a", l3, tok), consume("a", l3, 1)),
				want: refused(ok(1000, 667*ms), no(1000, 0, 667*ms)), loose: true},
			{at: 0, plan: plan(refund("a", l3, tok), consume("a", l3, 2*tok)),
				want: admitted(ok(0, 1000*ms), ok(0, 1000*ms))},
			// a check after a consume that emptied the bucket passes.
			{at: 0, plan: plan(refund("a", l3, tok), consume("a", l3, tok), check("a", l3)),
				want: admitted(ok(0, 1000*ms), ok(0, 1000*ms), ok(0, 1000*ms))},
		}},
		{"named_limits_share_item", []step{
			{at: 0, plan: plan(consume("k", l3, tok), named(consume("k", lTPM, 60*tok), "tpm")),
				want: admitted(ok(2000, 334*ms), ok(40_000, 600*ms))},
			{at: 0, plan: plan(consume("k", l3, tok), named(consume("k", lTPM, 60*tok), "tpm")),
				want: refused(ok(2000, 334*ms), no(40_000, 200*ms, 600*ms))},
			{at: 0, plan: plan(consume("k", l3, tok)), want: admitted(ok(1000, 667*ms))},
			{at: 0, plan: plan(named(check("k", lTPM), "tpm")), want: admitted(ok(40_000, 600*ms))},
			{at: 100 * ms, plan: plan(named(check("k", lTPM), "tpm"), check("k", l3)),
				want: admitted(ok(50_000, 500*ms), ok(1300, 567*ms))},
		}},
		{"check_zero_hits", []step{
			{at: 0, plan: plan(check("a", l3)), want: admitted(ok(3000, 0))},
			{at: 0, plan: plan(check("a", l3)), want: admitted(ok(3000, 0))},
			{at: 0, plan: plan(consume("a", l3, 2*tok)), want: admitted(ok(1000, 667*ms))},
			{at: 0, plan: plan(check("a", l3)), want: admitted(ok(1000, 667*ms))},
			{at: 0, plan: plan(consume("a", l3, 1*tok)), want: admitted(ok(0, 1000*ms))},
			// empty but not in debt: the check passes, as a counter at its
			// limit passes a check in envoyproxy/ratelimit.
			{at: 0, plan: plan(check("a", l3)), want: admitted(ok(0, 1000*ms))},
			{at: 1 * ms, plan: plan(check("a", l3)), want: admitted(ok(3, 999*ms))},
			{at: 1 * ms, plan: plan(check("a", l3)), want: admitted(ok(3, 999*ms))},
		}},
		{"charge_into_debt", []step{
			{at: 0, plan: plan(charge("c", l3, 2*tok)), want: admitted(ok(1000, 667*ms))},
			// does not fit: refused, applied all the same, into debt.
			{at: 0, plan: plan(charge("c", l3, 3*tok)), want: refused(no(-2000, 1667*ms, 1667*ms))},
			// in debt: refused, applied all the same.
			{at: 0, plan: plan(charge("c", l3, tok)), want: refused(no(-3000, 1334*ms, 2000*ms))},
			// applied even when another debit refuses the plan.
			{at: 0, plan: plan(consume("a", l3, 4*tok), charge("c", l3, tok)),
				want: refused(no(3000, 334*ms, 0), no(-4000, 1667*ms, 2334*ms))},
			{at: 0, plan: plan(consume("a", l3, tok), charge("d", l3, 2*tok)),
				want: admitted(ok(2000, 334*ms), ok(1000, 667*ms))},
			// refill repays the debt.
			{at: 1000 * ms, plan: plan(check("c", l3)), want: refused(no(-1000, 334*ms, 1334*ms))},
			{at: 1333 * ms, plan: plan(check("c", l3)), want: refused(no(-1, 1*ms, 1001*ms))},
			{at: 1334 * ms, plan: plan(check("c", l3)), want: admitted(ok(2, 1000*ms))},
			{at: 2334 * ms, plan: plan(check("c", l3)), want: admitted(ok(3000, 0))},
		}},
		{"refund_capped", []step{
			{at: 0, plan: plan(consume("r", l3, 2*tok)), want: admitted(ok(1000, 667*ms))},
			{at: 0, plan: plan(refund("r", l3, 5*tok)), want: admitted(ok(3000, 0))},
			{at: 0, plan: plan(refund("r", l3, tok)), want: admitted(ok(3000, 0))},
			{at: 0, plan: plan(consume("r", l3, 3*tok)), want: admitted(ok(0, 1000*ms))},
			// applied even when another debit refuses the plan.
			{at: 0, plan: plan(consume("a", l3, 4*tok), refund("r", l3, tok)),
				want: refused(no(3000, 334*ms, 0), ok(1000, 667*ms))},
			{at: 0, plan: plan(refund("r", l3, 1500)), want: admitted(ok(2500, 167*ms))},
		}},
		{"advisory_never_refuses", []step{
			{at: 0, plan: plan(consume("s", l3, 3*tok)), want: admitted(ok(0, 1000*ms))},
			{at: 0, plan: plan(consume("a", l3, tok), advisory(consume("s", l3, tok))),
				want: admitted(ok(2000, 334*ms), no(0, 334*ms, 1000*ms))},
			{at: 0, plan: plan(advisory(consume("s", l3, tok))), want: admitted(no(0, 334*ms, 1000*ms))},
			// an advisory debit that fits is debited.
			{at: 0, plan: plan(consume("a", l3, tok), advisory(consume("t", l3, tok))),
				want: admitted(ok(1000, 667*ms), ok(2000, 334*ms))},
			// an enforced refusal still refuses; nothing is debited.
			{at: 0, plan: plan(consume("s", l3, tok), advisory(consume("t", l3, tok))),
				want: refused(no(0, 334*ms, 1000*ms), ok(2000, 334*ms))},
			// a refused advisory debit is not debited, even in part.
			{at: 0, plan: plan(consume("a", l3, tok), advisory(consume("t", l3, 3*tok))),
				want: admitted(ok(0, 1000*ms), no(2000, 334*ms, 334*ms))},
			{at: 1 * ms, plan: plan(check("s", l3), check("t", l3)),
				want: admitted(ok(3, 999*ms), ok(2003, 333*ms))},
		}},
		{"quota_refuses_when_all_refuse", []step{
			{at: 0, plan: plan(consume("q1", l3, 3*tok)), want: admitted(ok(0, 1000*ms))},
			{at: 0, plan: plan(quota(consume("q1", l3, tok)), quota(consume("q2", l3, tok))),
				want: admitted(no(0, 334*ms, 1000*ms), ok(2000, 334*ms))},
			{at: 0, plan: plan(consume("q2", l3, 2*tok)), want: admitted(ok(0, 1000*ms))},
			{at: 0, plan: plan(quota(consume("q1", l3, tok)), quota(consume("q2", l3, tok))),
				want: refused(no(0, 334*ms, 1000*ms), no(0, 334*ms, 1000*ms))},
			{at: 0, plan: plan(consume("e", l3, tok), quota(consume("q1", l3, tok)), quota(consume("q2", l3, tok))),
				want: refused(ok(3000, 0), no(0, 334*ms, 1000*ms), no(0, 334*ms, 1000*ms))},
			{at: 0, plan: plan(consume("e", l3, tok), quota(consume("q1", l3, tok)), quota(consume("q3", l3, tok))),
				want: admitted(ok(2000, 334*ms), no(0, 334*ms, 1000*ms), ok(2000, 334*ms))},
		}},
		{"capacity_change_clamps", []step{
			{at: 0, plan: plan(consume("a", lFive, tok)), want: admitted(ok(4000, 200*ms))},
			// reload with a lower capacity: the bucket holds at most 2 tokens.
			{at: 0, plan: plan(check("a", lTwo)), want: admitted(ok(2000, 0))},
			{at: 0, plan: plan(consume("a", lTwo, 2*tok)), want: admitted(ok(0, 1000*ms))},
			{at: 0, plan: plan(consume("a", lTwo, tok)), want: refused(no(0, 500*ms, 1000*ms))},
			// raised again: nothing is invented, refill goes on at the new rate.
			{at: 0, plan: plan(consume("a", lFive, 1)), want: refused(no(0, 1*ms, 1000*ms))},
			{at: 100 * ms, plan: plan(check("a", lFive)), want: admitted(ok(500, 900*ms))},
		}},
		{"rate_change_keeps_tokens", []step{
			{at: 0, plan: plan(consume("a", lOne, 500)), want: admitted(ok(500, 500*ms))},
			// reload at a sixtieth of the rate: the bucket keeps its 500 mt
			// and refills one millitoken every 60 ms.
			{at: 0, plan: plan(check("a", lMinute)), want: admitted(ok(500, 30*time.Second))},
			{at: 60 * ms, plan: plan(check("a", lMinute)), want: admitted(ok(501, 29940*ms))},
			{at: 60 * ms, plan: plan(consume("a", lMinute, 501)), want: admitted(ok(0, 60*time.Second))},
			// and back: 1 mt/ms from what it holds.
			{at: 60 * ms, plan: plan(consume("a", lOne, 1)), want: refused(no(0, 1*ms, 1000*ms))},
			{at: 61 * ms, plan: plan(check("a", lOne)), want: admitted(ok(1, 999*ms))},
		}},
		{"calendar_budget", []step{
			{at: 0, plan: plan(consume("a", lDay, 3*tok)), want: admitted(ok(0, 12*time.Hour))},
			{at: time.Hour, plan: plan(consume("a", lDay, tok)), want: refused(no(0, 11*time.Hour, 11*time.Hour))},
			// nothing refills within the day, to the last millisecond
			{at: 12*time.Hour - ms, plan: plan(consume("a", lDay, tok)), want: refused(no(0, ms, ms))},
			{at: 12 * time.Hour, plan: plan(consume("a", lDay, tok)), want: admitted(ok(2000, 24*time.Hour))},
			// a charge past the total carries its debt into the next day...
			{at: 13 * time.Hour, plan: plan(charge("a", lDay, 4*tok)), want: refused(no(-2000, 47*time.Hour, 47*time.Hour))},
			{at: 36 * time.Hour, plan: plan(check("a", lDay)), want: admitted(ok(1000, 24*time.Hour))},
			// ...or is forgiven at midnight
			{at: 0, plan: plan(charge("f", lDayForgive, 5*tok)), want: refused(no(-2000, 12*time.Hour, 12*time.Hour))},
			{at: 12 * time.Hour, plan: plan(check("f", lDayForgive)), want: admitted(ok(3000, 0))},
		}},
		{"statuses_one_per_debit_in_order", []step{
			{at: 0, plan: plan(consume("a", l3, tok), check("b", lOne), charge("c", l3, 2*tok), refund("d", l3, tok)),
				want: admitted(ok(2000, 334*ms), ok(1000, 0), ok(1000, 667*ms), ok(3000, 0))},
			{at: 0, plan: plan(check("b", lOne), consume("a", l3, 3*tok), charge("c", l3, tok), consume("d", l3, tok)),
				want: refused(ok(1000, 0), no(2000, 334*ms, 334*ms), ok(0, 1000*ms), ok(3000, 0))},
			{at: 10 * ms, plan: plan(consume("d", l3, tok), consume("a", l3, tok), check("c", l3)),
				want: admitted(ok(2000, 334*ms), ok(1030, 657*ms), ok(30, 990*ms))},
		}},
	}
}

// distinctKeys are bucket limits that differ in one field only, with the
// characters that naive key encodings conflate. Each must be its own bucket.
func distinctKeys() []cascade.Debit {
	long := strings.Repeat("x", 2048)
	longY := strings.Repeat("x", 2047) + "y"
	type kl struct {
		k     cascade.Key
		limit string
	}
	var list = []kl{
		{cascade.Key{Namespace: "a", Entity: "b", Resource: "c"}, "rpm"},
		{cascade.Key{Namespace: "a", Entity: "b#c", Resource: "d"}, "rpm"},
		{cascade.Key{Namespace: "a", Entity: "b", Resource: "c#d"}, "rpm"},
		{cascade.Key{Namespace: "a#b", Entity: "c", Resource: "d"}, "rpm"},
		{cascade.Key{Namespace: "a", Entity: "b", Resource: "c"}, "rpm#"},
		{cascade.Key{Namespace: "a", Entity: "b", Resource: "c#rpm"}, ""},
		{cascade.Key{Namespace: "a", Entity: "b", Resource: "c"}, "tpm"},
		{cascade.Key{Namespace: "a/b", Entity: "c", Resource: "d"}, "rpm"},
		{cascade.Key{Namespace: "a", Entity: "b/c", Resource: "d"}, "rpm"},
		{cascade.Key{Namespace: "a", Entity: "b/BUCKET#c", Resource: "d"}, "rpm"},
		{cascade.Key{Namespace: "a", Entity: "b%23c", Resource: "d"}, "rpm"},
		{cascade.Key{Namespace: "a", Entity: "b%", Resource: "d"}, "rpm"},
		{cascade.Key{Namespace: "a", Entity: "b%2", Resource: "d"}, "rpm"},
		{cascade.Key{Namespace: "a", Entity: "b%25", Resource: "d"}, "rpm"},
		{cascade.Key{Namespace: "a", Entity: "é", Resource: "d"}, "rpm"},
		{cascade.Key{Namespace: "a", Entity: "e\u0301", Resource: "d"}, "rpm"},
		{cascade.Key{Namespace: "a", Entity: "日本語", Resource: "d"}, "rpm"},
		{cascade.Key{Namespace: "a", Entity: "b\x00c", Resource: "d"}, "rpm"},
		{cascade.Key{Namespace: "a", Entity: "b", Resource: "c"}, "é"},
		{cascade.Key{Namespace: "", Entity: "", Resource: ""}, "rpm"},
		{cascade.Key{Namespace: "x", Entity: "", Resource: ""}, "rpm"},
		{cascade.Key{Namespace: "", Entity: "x", Resource: ""}, "rpm"},
		{cascade.Key{Namespace: "", Entity: "", Resource: "x"}, "rpm"},
		{cascade.Key{Namespace: "", Entity: "", Resource: ""}, "x"},
		{cascade.Key{Namespace: "a", Entity: long, Resource: "d"}, "rpm"},
		{cascade.Key{Namespace: "a", Entity: longY, Resource: "d"}, "rpm"},
		{cascade.Key{Namespace: long, Entity: "b", Resource: "d"}, "rpm"},
		{cascade.Key{Namespace: "a", Entity: "b", Resource: long}, "rpm"},
		{cascade.Key{Namespace: "a", Entity: "b", Resource: longY}, "rpm"},
	}
	debits := make([]cascade.Debit, len(list))
	for i, e := range list {
		debits[i] = debit(e.k, e.limit, lOne, cascade.Consume, tok)
	}
	return debits
}

func testDistinctKeys(t *testing.T, f Factory) {
	if err := checkDistinctKeys(f(t, NewClock(Epoch))); err != nil {
		t.Fatal(err)
	}
}

// checkDistinctKeys takes the whole of every distinctKeys bucket in one plan
// (admitted only if no two of them are the same bucket), then checks that
// each is remembered as empty.
func checkDistinctKeys(s Store) error {
	debits := distinctKeys()
	p := &cascade.Plan{Debits: debits}
	got, err := s.Acquire(context.Background(), p)
	if err != nil {
		return fmt.Errorf("Acquire(%d distinct keys) error = %w, want nil", len(debits), err)
	}
	want := cascade.Decision{Admitted: true, Statuses: make([]cascade.Status, len(debits))}
	for i := range want.Statuses {
		want.Statuses[i] = ok(0, 1000*ms)
	}
	if !sameDecision(p, got, want, false) {
		return fmt.Errorf("Acquire(%d distinct keys) = %s, want every debit admitted with 0 remaining", len(debits), format(got))
	}
	for _, d := range debits {
		p := &cascade.Plan{Debits: []cascade.Debit{d}}
		got, err := s.Acquire(context.Background(), p)
		if err != nil {
			return fmt.Errorf("Acquire(%s) error = %w, want nil", describe(p), err)
		}
		if want := refused(no(0, 1000*ms, 1000*ms)); !sameDecision(p, got, want, false) {
			return fmt.Errorf("Acquire(%s) = %s, want %s", describe(p), format(got), format(want))
		}
	}
	return nil
}

func testEmptyPlan(t *testing.T, f Factory) {
	s := f(t, NewClock(Epoch))
	got, err := s.Acquire(context.Background(), &cascade.Plan{})
	if err != nil || !got.Admitted || len(got.Statuses) != 0 {
		t.Fatalf("Acquire(empty plan) = %s, %v, want admitted with no statuses, nil", format(got), err)
	}
}

func testCanceled(t *testing.T, f Factory) {
	s := f(t, NewClock(Epoch))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p := &cascade.Plan{Debits: plan(consume("a", l3, tok))}
	if got, err := s.Acquire(ctx, p); !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire(canceled ctx, %s) = %s, %v, want an error wrapping context.Canceled", describe(p), format(got), err)
	}
	runSteps(t, s, NewClock(Epoch), []step{
		{at: 0, plan: plan(check("a", l3)), want: admitted(ok(3000, 0))},
	})
}

func testPlanNotModified(t *testing.T, f Factory) {
	clock := NewClock(Epoch)
	s := f(t, clock)
	debits := plan(consume("a", l3, tok), charge("b", l3, tok), refund("a", l3, tok), advisory(check("c", lOne)))
	orig := append([]cascade.Debit(nil), debits...)
	if _, err := s.Acquire(context.Background(), &cascade.Plan{Debits: debits}); err != nil {
		t.Fatalf("Acquire(...) error = %v, want nil", err)
	}
	for i := range debits {
		if debits[i] != orig[i] {
			t.Fatalf("Acquire changed debit %d of its plan: %+v, want %+v", i, debits[i], orig[i])
		}
	}
}

// describe renders a plan for failure messages, eliding long key parts.
func describe(p *cascade.Plan) string {
	var b strings.Builder
	b.WriteString("[")
	for i, d := range p.Debits {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s(%q/%q/%q:%q %d", d.Op, short(d.Key.Namespace), short(d.Key.Entity), short(d.Key.Resource), short(d.Limit), d.Amount)
		switch d.Role {
		case cascade.Advisory:
			b.WriteString(" advisory")
		case cascade.Quota:
			b.WriteString(" quota")
		}
		b.WriteString(")")
	}
	b.WriteString("]")
	return b.String()
}

func short(s string) string {
	if len(s) <= 24 {
		return s
	}
	return fmt.Sprintf("%s…(%d bytes)", s[:16], len(s))
}

func format(d cascade.Decision) string {
	var b strings.Builder
	fmt.Fprintf(&b, "{admitted:%t", d.Admitted)
	for _, s := range d.Statuses {
		fmt.Fprintf(&b, " {ok:%t rem:%d retry:%v reset:%v}", s.OK, s.Remaining, s.RetryAfter, s.ResetAfter)
	}
	b.WriteString("}")
	return b.String()
}
