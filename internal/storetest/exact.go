package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// Option adjusts Run for one store.
type Option func(*options)

type options struct {
	maxCalls int
}

// WithMaxCalls bounds the Acquire calls of each of Run's long behaviours
// (every_millisecond, any_time_split, which otherwise make up to 600,001 and
// about 10,000) for stores whose calls are slow, such as a store over a
// network: every_millisecond then asks every k ms, k the least divisor of
// 600 that keeps it within n calls (the answer is still exactly 1,100), and
// any_time_split runs fewer cases. n ≤ 0 means no bound.
func WithMaxCalls(n int) Option {
	return func(o *options) { o.maxCalls = n }
}

func (o *options) calls(want int) int {
	if o.maxCalls > 0 {
		return min(want, o.maxCalls)
	}
	return want
}

// Exactness limits: 100 a minute; 1,000 a month (30 days).
var (
	lPerMinute = limit(100*tok, 100*tok, time.Minute)
	lPerMonth  = limit(1000*tok, 1000*tok, 30*24*time.Hour)
)

// testEveryMillisecond asks a 100/min bucket for one token every
// millisecond (or every step ms) for ten minutes, t in [0, 600000] ms: it
// admits its capacity plus exactly one token per 600 ms, 1,100 in all. A
// store that rounds refill, or saves a refused decision's refill, admits
// fewer.
func testEveryMillisecond(t *testing.T, f Factory, o *options) {
	const span = 600_000
	step := 1
	// Steps divide 600,000 and stay below the 600 ms a token takes to
	// refill: a caller that asks slower than that never drains the burst.
	for _, k := range []int{1, 2, 3, 4, 5, 6, 8, 10, 12, 15, 20, 24, 25, 30, 40, 50, 60, 75, 100, 120, 150, 200, 300} {
		step = k
		if span/k+1 <= o.calls(span+1) {
			break
		}
	}
	clock := NewClock(Epoch)
	s := f(t, clock)
	p := &cascade.Plan{Debits: plan(consume("minute", lPerMinute, tok))}
	admitted := 0
	for at := 0; at <= span; at += step {
		clock.Set(Epoch.Add(time.Duration(at) * ms))
		dec, err := s.Acquire(context.Background(), p)
		if err != nil {
			t.Fatalf("at +%dms: Acquire(%s) error = %v, want nil", at, describe(p), err)
		}
		if dec.Admitted {
			admitted++
		}
	}
	if admitted != 1100 {
		t.Errorf("100/min asked every %d ms for t in [0, %d] ms admitted %d, want exactly 1100 (100 + 600000/600)", step, span, admitted)
	}
}

// testAnyTimeSplit draws random limits and random ways to split a stretch
// of time into instants; at each instant the caller takes one token at a
// time until refused. Gaps are short enough that the bucket never reaches
// its capacity between instants, so no refill is lost to the clamp, and the
// tokens admitted over the stretch T must be within one token of
// capacity + refill·T, never above it, however time is split.
func testAnyTimeSplit(t *testing.T, f Factory, o *options) {
	cases := max(1, o.calls(12_000)/1_000)
	periods := []time.Duration{ms, 7 * ms, time.Second, time.Minute, time.Hour, 30 * 24 * time.Hour}
	rng := rand.New(rand.NewPCG(7, 11))
	for c := range cases {
		capacity := tokenbucket.Millitokens(2+rng.IntN(19))*tok + tokenbucket.Millitokens(rng.IntN(1000))
		period := periods[rng.IntN(len(periods))]
		periodMs := period.Milliseconds()
		gapMax := int64(1 + rng.IntN(100_000))
		// refill·gapMax ≤ capacity − 1 token: the bucket, under one token
		// after each instant, stays below capacity until the next.
		refill := tokenbucket.Millitokens(max(1, int64(capacity-tok)*periodMs/gapMax))
		gapMax = max(1, min(gapMax, int64(capacity-tok)*periodMs/int64(refill)))
		l := limit(capacity, refill, period)
		points := 1 + rng.IntN(40)
		name := fmt.Sprintf("case %d: limit %+v, %d instants, gaps ≤ %d ms", c, l, points, gapMax)

		clock := NewClock(Epoch)
		s := f(t, clock)
		p := &cascade.Plan{Debits: plan(consume(fmt.Sprint("split-", c), l, tok))}
		var at, admitted int64
		for i := range points {
			if i > 0 {
				at += 1 + rng.Int64N(gapMax)
			}
			clock.Set(Epoch.Add(time.Duration(at) * ms))
			for {
				dec, err := s.Acquire(context.Background(), p)
				if err != nil {
					t.Fatalf("%s: at +%dms: Acquire error = %v, want nil", name, at, err)
				}
				if !dec.Admitted {
					break
				}
				admitted++
			}
		}
		// In millitoken·ms: admitted·1000·rp against capacity·rp + refill·T.
		got := tokenbucket.Mul(admitted*int64(tok), periodMs)
		most := tokenbucket.Mul(int64(capacity), periodMs).Add(tokenbucket.Mul(int64(refill), at))
		least := most.Sub(tokenbucket.Mul(int64(tok), periodMs))
		if most.Less(got) {
			t.Errorf("%s: admitted %d tokens over %d ms, want at most capacity + refill·t = %s/%d mt", name, admitted, at, most, periodMs)
		}
		if !least.Less(got) {
			t.Errorf("%s: admitted %d tokens over %d ms, want more than capacity + refill·t − 1 token = %s/%d mt", name, admitted, at, least, periodMs)
		}
	}
}

// testIdleMonth drains a 1,000-a-month bucket, leaves it idle for 8 days,
// and takes one token at a time: refill allows 266⅔ tokens, so exactly 266
// are admitted, and two thirds of a token remain; not a full bucket (a
// store that forgets a bucket before it is full again would admit 1,000).
func testIdleMonth(t *testing.T, f Factory) {
	clock := NewClock(Epoch)
	s := f(t, clock)
	runSteps(t, s, clock, []step{
		{at: 0, plan: plan(consume("month", lPerMonth, 1000*tok)), want: admitted(ok(0, 30*24*time.Hour))},
	})
	clock.Set(Epoch.Add(8 * 24 * time.Hour))
	p := &cascade.Plan{Debits: plan(consume("month", lPerMonth, tok))}
	admitted := 0
	for range 1001 {
		dec, err := s.Acquire(context.Background(), p)
		if err != nil {
			t.Fatalf("Acquire(%s) error = %v, want nil", describe(p), err)
		}
		if !dec.Admitted {
			break
		}
		admitted++
	}
	if admitted != 266 {
		t.Errorf("a drained 1000/month bucket idle for 8 days admitted %d one-token requests, want 266 (8/30 of 1000, rounded down)", admitted)
	}
	check := &cascade.Plan{Debits: plan(check("month", lPerMonth))}
	dec, err := s.Acquire(context.Background(), check)
	if err != nil {
		t.Fatalf("Acquire(%s) error = %v, want nil", describe(check), err)
	}
	if got := dec.Statuses[0].Remaining; got != 666 {
		t.Errorf("Acquire(%s) remaining = %d, want 666 (⅔ of a token)", describe(check), got)
	}
}
