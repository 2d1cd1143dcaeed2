package tokenbucket_test

import (
	"errors"
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

type (
	Limit       = tokenbucket.Limit
	State       = tokenbucket.State
	Millitokens = tokenbucket.Millitokens
)

const (
	perToken = tokenbucket.PerToken
	day      = 24 * time.Hour
	week     = 7 * day
	month    = 30 * day
	year     = 365 * day
)

func TestNewLimit(t *testing.T) {
	max := tokenbucket.MaxMillitokens
	tests := []struct {
		name    string
		cp, ra  Millitokens
		rp      time.Duration
		wantErr error
	}{
		{"one millitoken per millisecond", 1, 1, time.Millisecond, nil},
		{"largest everything", max, max, 10 * year, nil},
		{"zero capacity", 0, 1, time.Second, tokenbucket.ErrCapacity},
		{"negative capacity", -1, 1, time.Second, tokenbucket.ErrCapacity},
		{"capacity above max", max + 1, 1, time.Second, tokenbucket.ErrCapacity},
		{"zero refill", 1, 0, time.Second, tokenbucket.ErrRefill},
		{"negative refill", 1, -5, time.Second, tokenbucket.ErrRefill},
		{"refill above max", 1, max + 1, time.Second, tokenbucket.ErrRefill},
		{"zero period", 1, 1, 0, tokenbucket.ErrPeriod},
		{"negative period", 1, 1, -time.Second, tokenbucket.ErrPeriod},
		{"sub-millisecond period", 1, 1, 999 * time.Microsecond, tokenbucket.ErrPeriod},
		{"one nanosecond period", 1, 1, time.Nanosecond, tokenbucket.ErrPeriod},
		{"non-whole-millisecond period", 1, 1, 1500 * time.Microsecond, tokenbucket.ErrPeriod},
		{"one second and a nanosecond", 1, 1, time.Second + time.Nanosecond, tokenbucket.ErrPeriod},
		{"whole milliseconds", 1, 1, 1001 * time.Millisecond, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tokenbucket.NewLimit(tt.cp, tt.ra, tt.rp)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("NewLimit(%d, %d, %v) error = %v, want %v", tt.cp, tt.ra, tt.rp, err, tt.wantErr)
			}
			want := Limit{}
			if tt.wantErr == nil {
				want = Limit{Capacity: tt.cp, RefillAmount: tt.ra, RefillPeriod: tt.rp}
			}
			if got != want {
				t.Errorf("NewLimit(%d, %d, %v) = %+v, want %+v", tt.cp, tt.ra, tt.rp, got, want)
			}
		})
	}
}

func TestRate(t *testing.T) {
	maxTokens := uint64(tokenbucket.MaxMillitokens / perToken)
	tests := []struct {
		name     string
		requests uint64
		period   time.Duration
		burst    uint64
		want     Limit
		wantErr  bool
		errIs    error
	}{
		{name: "10 per second", requests: 10, period: time.Second,
			want: Limit{Capacity: 10_000, RefillAmount: 10_000, RefillPeriod: time.Second}},
		{name: "burst below requests keeps requests", requests: 10, period: time.Second, burst: 3,
			want: Limit{Capacity: 10_000, RefillAmount: 10_000, RefillPeriod: time.Second}},
		{name: "burst above requests raises capacity", requests: 10, period: time.Minute, burst: 25,
			want: Limit{Capacity: 25_000, RefillAmount: 10_000, RefillPeriod: time.Minute}},
		{name: "burst equal to requests", requests: 7, period: time.Hour, burst: 7,
			want: Limit{Capacity: 7_000, RefillAmount: 7_000, RefillPeriod: time.Hour}},
		{name: "10^12 per year", requests: 1e12, period: year,
			want: Limit{Capacity: 1e15, RefillAmount: 1e15, RefillPeriod: year}},
		{name: "largest request count", requests: maxTokens, period: time.Millisecond,
			want: Limit{Capacity: Millitokens(maxTokens) * perToken, RefillAmount: Millitokens(maxTokens) * perToken, RefillPeriod: time.Millisecond}},
		{name: "largest burst", requests: 1, period: time.Second, burst: maxTokens,
			want: Limit{Capacity: Millitokens(maxTokens) * perToken, RefillAmount: perToken, RefillPeriod: time.Second}},
		{name: "zero requests", requests: 0, period: time.Second, wantErr: true},
		{name: "too many requests", requests: maxTokens + 1, period: time.Second, wantErr: true},
		{name: "max uint64 requests", requests: math.MaxUint64, period: time.Second, wantErr: true},
		{name: "burst too large", requests: 1, period: time.Second, burst: maxTokens + 1, wantErr: true},
		{name: "zero period", requests: 1, period: 0, wantErr: true, errIs: tokenbucket.ErrPeriod},
		{name: "sub-millisecond period", requests: 1, period: 500 * time.Microsecond, wantErr: true, errIs: tokenbucket.ErrPeriod},
		{name: "non-whole-millisecond period", requests: 1, period: 2*time.Millisecond + 1, wantErr: true, errIs: tokenbucket.ErrPeriod},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tokenbucket.Rate(tt.requests, tt.period, tt.burst)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Rate(%d, %v, %d) error = %v, want error %t", tt.requests, tt.period, tt.burst, err, tt.wantErr)
			}
			if tt.errIs != nil && !errors.Is(err, tt.errIs) {
				t.Errorf("Rate(%d, %v, %d) error = %v, want %v", tt.requests, tt.period, tt.burst, err, tt.errIs)
			}
			if err != nil {
				if got != (Limit{}) {
					t.Errorf("Rate(%d, %v, %d) = %+v with error, want zero Limit", tt.requests, tt.period, tt.burst, got)
				}
				return
			}
			if got != tt.want {
				t.Errorf("Rate(%d, %v, %d) = %+v, want %+v", tt.requests, tt.period, tt.burst, got, tt.want)
			}
		})
	}
}

// TestRateUnits builds every envoyproxy/ratelimit unit with unit multipliers
// and checks that a full bucket drains exactly and refills exactly one period
// later.
func TestRateUnits(t *testing.T) {
	units := []struct {
		name string
		d    time.Duration
	}{
		{"second", time.Second}, {"minute", time.Minute}, {"hour", time.Hour},
		{"day", day}, {"week", week}, {"month", month}, {"year", year},
	}
	for _, u := range units {
		for _, mult := range []int64{1, 2, 5, 10, 60} {
			for _, requests := range []uint64{1, 3, 1000, 1e12} {
				period := time.Duration(mult) * u.d
				l, err := tokenbucket.Rate(requests, period, 0)
				if err != nil {
					t.Fatalf("Rate(%d, %v, 0): %v", requests, period, err)
				}
				want := Limit{Capacity: Millitokens(requests) * perToken, RefillAmount: Millitokens(requests) * perToken, RefillPeriod: period}
				if l != want {
					t.Fatalf("Rate(%d, %d×%s) = %+v, want %+v", requests, mult, u.name, l, want)
				}
				const t0 = 1_700_000_000_000
				s := l.Full(t0)
				s = l.ForceConsume(s, l.Capacity, t0)
				if got := l.Available(s, t0); got != 0 {
					t.Errorf("%d per %d×%s: Available after draining = %d, want 0", requests, mult, u.name, got)
				}
				pms := period.Milliseconds()
				if got := l.TimeToFull(s, t0); got != period {
					t.Errorf("%d per %d×%s: TimeToFull(empty) = %v, want %v", requests, mult, u.name, got, period)
				}
				if got := l.Refill(s, t0+pms); got != (State{Tokens: l.Capacity, LastRefill: t0 + pms}) {
					t.Errorf("%d per %d×%s: Refill(empty, +period) = %+v, want full", requests, mult, u.name, got)
				}
				if got := l.Refill(s, t0+pms-1); got.Tokens >= l.Capacity {
					t.Errorf("%d per %d×%s: Refill(empty, +period−1ms) = %+v, want below capacity", requests, mult, u.name, got)
				}
				// One token takes period/requests, rounded up to the millisecond.
				oneToken := ceilDiv(pms, int64(requests))
				if got := l.Available(s, t0+oneToken); got != 1 && !(requests > uint64(pms)) {
					t.Errorf("%d per %d×%s: Available after %d ms = %d, want 1", requests, mult, u.name, oneToken, got)
				}
				if got, want := l.RetryAfter(s, perToken, t0), time.Duration(pms*1000/(int64(requests)*1000)+1)*time.Millisecond; requests <= uint64(pms) && got != want {
					t.Errorf("%d per %d×%s: RetryAfter(empty, 1 token) = %v, want %v", requests, mult, u.name, got, want)
				}
			}
		}
	}
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// step is one call at a fixed instant and the state it must leave.
type step struct {
	name string
	at   int64
	op   func(Limit, State, int64) State
	want State
}

func refill(l Limit, s State, now int64) State { return l.Refill(s, now) }

func runSteps(t *testing.T, l Limit, s State, steps []step) {
	t.Helper()
	for i, st := range steps {
		op := st.op
		if op == nil {
			op = refill
		}
		got := op(l, s, st.at)
		if got != st.want {
			t.Fatalf("step %d (%s) at %d from %+v = %+v, want %+v", i, st.name, st.at, s, got, st.want)
		}
		if got.Tokens > l.Capacity {
			t.Fatalf("step %d (%s): tokens %d above capacity %d", i, st.name, got.Tokens, l.Capacity)
		}
		s = got
	}
}

func TestRefill(t *testing.T) {
	tenPerSecond := Limit{Capacity: 10_000, RefillAmount: 10_000, RefillPeriod: time.Second} // 10 mt/ms
	slow := Limit{Capacity: 1000, RefillAmount: 3, RefillPeriod: 10 * time.Millisecond}      // 0.3 mt/ms
	consume := func(n Millitokens) func(Limit, State, int64) State {
		return func(l Limit, s State, now int64) State {
			s, ok := l.TryConsume(s, n, now)
			if !ok {
				t.Fatalf("TryConsume(%+v, %d, %d) refused", s, n, now)
			}
			return s
		}
	}
	tests := []struct {
		name  string
		l     Limit
		start State
		steps []step
	}{
		{"whole millitokens per millisecond", tenPerSecond, State{0, 1000}, []step{
			{name: "same instant", at: 1000, want: State{0, 1000}},
			{name: "one ms", at: 1001, want: State{10, 1001}},
			{name: "half a second", at: 1500, want: State{5000, 1500}},
			{name: "one ms short of full", at: 1999, want: State{9990, 1999}},
			{name: "just full", at: 2000, want: State{10_000, 2000}},
			{name: "full stays full, clock moves", at: 5000, want: State{10_000, 5000}},
		}},
		{"partial refills carry the remainder", slow, State{0, 0}, []step{
			{name: "0.3 mt", at: 1, want: State{0, 0}},
			{name: "0.9 mt", at: 3, want: State{0, 0}},
			{name: "1.2 mt buys 1 in 4 ms", at: 4, want: State{1, 4}},
			{name: "1.8 mt buys 1 in 4 ms", at: 10, want: State{2, 8}},
			{name: "repeat in the same ms", at: 10, want: State{2, 8}},
			{name: "3.6 mt buys 3 in 10 ms", at: 20, want: State{5, 18}},
			{name: "exact 3 mt in 10 ms", at: 28, want: State{8, 28}},
		}},
		{"clock backwards is zero elapsed", tenPerSecond, State{500, 1000}, []step{
			{name: "backwards", at: 900, want: State{500, 1000}},
			{name: "far backwards", at: math.MinInt64, want: State{500, 1000}},
			{name: "forward again counts from the old refill", at: 1010, want: State{600, 1010}},
		}},
		{"full bucket never moves its clock back", tenPerSecond, State{10_000, 1000}, []step{
			{name: "backwards", at: 400, want: State{10_000, 1000}},
			{name: "forwards", at: 1200, want: State{10_000, 1200}},
		}},
		{"a full bucket banks no time", tenPerSecond, State{10_000, 0}, []step{
			{name: "idle for a minute", at: 60_000, want: State{10_000, 60_000}},
			{name: "consume 5 tokens", at: 60_000, op: consume(5000), want: State{5000, 60_000}},
			{name: "one ms later only one ms of refill", at: 60_001, want: State{5010, 60_001}},
		}},
		{"above capacity is clamped", tenPerSecond, State{25_000, 100}, []step{
			{name: "clamped at the same instant", at: 100, want: State{10_000, 100}},
		}},
		{"above capacity with the clock backwards", tenPerSecond, State{25_000, 100}, []step{
			{name: "clamped, clock kept", at: 50, want: State{10_000, 100}},
		}},
		{"debt is repaid", tenPerSecond, State{-5000, 0}, []step{
			{name: "half repaid", at: 250, want: State{-2500, 250}},
			{name: "zero", at: 500, want: State{0, 500}},
			{name: "full", at: 1500, want: State{10_000, 1500}},
		}},
		{"below the debt floor is raised to it", tenPerSecond, State{math.MinInt64, 0}, []step{
			{name: "clamped at the same instant", at: 0, want: State{tokenbucket.MinMillitokens, 0}},
			{name: "then repaid at the rate", at: 1, want: State{tokenbucket.MinMillitokens + 10, 1}},
		}},
		{"overshoot fills exactly", tenPerSecond, State{9995, 0}, []step{
			{name: "1 ms adds 10 but only 5 fit", at: 1, want: State{10_000, 1}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { runSteps(t, tt.l, tt.start, tt.steps) })
	}
}

// TestRefillSameMillisecond: 1,000,000 tokens per minute, 1,000 calls within
// one millisecond add nothing twice.
func TestRefillSameMillisecond(t *testing.T) {
	l, err := tokenbucket.Rate(1_000_000, time.Minute, 0)
	if err != nil {
		t.Fatal(err)
	}
	const t0 = 1_700_000_000_000
	s := State{Tokens: 0, LastRefill: t0}
	// 10^9 mt per 60,000 ms = 16,666.6… mt per ms.
	for i := range 1000 {
		s = l.Refill(s, t0+1)
		if want := (State{Tokens: 16_666, LastRefill: t0 + 1}); s != want {
			t.Fatalf("call %d at t0+1: Refill = %+v, want %+v", i, s, want)
		}
	}
	for i := range 1000 {
		var ok bool
		s, ok = l.TryConsume(s, 1, t0+1)
		if !ok {
			t.Fatalf("call %d at t0+1: TryConsume(1) refused with %+v", i, s)
		}
	}
	if want := (State{Tokens: 15_666, LastRefill: t0 + 1}); s != want {
		t.Fatalf("after 1000 consumes at t0+1: %+v, want %+v", s, want)
	}
	// Three ms in one call buy 50,000 mt (exactly 3 ms).
	if got, want := l.Refill(State{0, t0}, t0+3), (State{Tokens: 50_000, LastRefill: t0 + 3}); got != want {
		t.Errorf("Refill(empty, +3ms) = %+v, want %+v", got, want)
	}
}

func TestTryConsume(t *testing.T) {
	l := Limit{Capacity: 3000, RefillAmount: 3000, RefillPeriod: time.Minute} // 3/min: 20 ms per mt
	type call struct {
		at     int64
		n      Millitokens
		wantOK bool
		want   State
	}
	calls := []call{
		{0, 1000, true, State{2000, 0}},
		{0, 1000, true, State{1000, 0}},
		{0, 1001, false, State{1000, 0}}, // refusal debits nothing
		{0, 1000, true, State{0, 0}},
		{0, 1, false, State{0, 0}},
		{0, 0, true, State{0, 0}},   // zero always fits a non-negative bucket
		{0, -50, true, State{0, 0}}, // negative is zero
		{19, 1, false, State{0, 0}}, // 0.95 mt
		{20, 1, true, State{0, 20}},
		{20_020, 1000, true, State{0, 20_020}},
		{20_020, 4000, false, State{0, 20_020}},
		{1_000_000, 3001, false, State{3000, 1_000_000}}, // more than capacity never fits
		{1_000_000, 3000, true, State{0, 1_000_000}},
	}
	s := l.Full(0)
	for i, c := range calls {
		got, ok := l.TryConsume(s, c.n, c.at)
		if ok != c.wantOK || got != c.want {
			t.Fatalf("call %d: TryConsume(%+v, %d, %d) = %+v, %t, want %+v, %t", i, s, c.n, c.at, got, ok, c.want, c.wantOK)
		}
		s = got
	}
}

func TestDebt(t *testing.T) {
	l := Limit{Capacity: 3000, RefillAmount: 3000, RefillPeriod: time.Minute} // 20 ms per mt
	type check struct {
		at        int64
		available int64
		check     bool
		tokens    Millitokens
	}
	s := l.Full(0)
	s = l.ForceConsume(s, 5000, 0)
	if want := (State{-2000, 0}); s != want {
		t.Fatalf("ForceConsume(full, 5000) = %+v, want %+v", s, want)
	}
	if _, ok := l.TryConsume(s, 0, 0); ok {
		t.Fatalf("TryConsume(in debt, 0) admitted, want refused")
	}
	for _, c := range []check{
		{0, -2, false, -2000},
		{20, -2, false, -1999},            // −1.999 tokens floors to −2
		{20_000, -1, false, -1000},        // −1 token exactly
		{20_020, -1, false, -999},         // −0.999 floors to −1
		{39_980, -1, false, -1},           // −1 millitoken → −1 token
		{40_000, 0, false, 0},             // out of debt, still empty: Check needs > 0
		{40_020, 0, true, 1},              // one millitoken: Check passes, Available 0
		{60_000, 1, true, 1000},           // one token
		{100_000, 3, true, 3000},          // full again
		{1 << 40, 3, true, 3000},          // and stays full
		{-5, -2, false, -2000},            // clock backwards
		{math.MinInt64, -2, false, -2000}, // far backwards
		{math.MaxInt64, 3, true, 3000},    // far forwards
	} {
		if got := l.Available(s, c.at); got != c.available {
			t.Errorf("Available(%+v, %d) = %d, want %d", s, c.at, got, c.available)
		}
		if got := l.Check(s, c.at); got != c.check {
			t.Errorf("Check(%+v, %d) = %t, want %t", s, c.at, got, c.check)
		}
		if got := l.Refill(s, c.at).Tokens; got != c.tokens {
			t.Errorf("Refill(%+v, %d).Tokens = %d, want %d", s, c.at, got, c.tokens)
		}
	}
}

func TestDebtSaturates(t *testing.T) {
	l := Limit{Capacity: tokenbucket.MaxMillitokens, RefillAmount: 1, RefillPeriod: 10 * year}
	s := l.Full(0)
	for i := range 10 {
		s = l.ForceConsume(s, tokenbucket.MaxMillitokens, 0)
		if s.Tokens < tokenbucket.MinMillitokens {
			t.Fatalf("ForceConsume #%d: tokens %d below MinMillitokens", i, s.Tokens)
		}
	}
	if s.Tokens != tokenbucket.MinMillitokens {
		t.Fatalf("after 10 maximal charges tokens = %d, want MinMillitokens", s.Tokens)
	}
	s = l.ForceConsume(s, math.MaxInt64, 0)
	if s.Tokens != tokenbucket.MinMillitokens {
		t.Fatalf("ForceConsume(MaxInt64) tokens = %d, want MinMillitokens", s.Tokens)
	}
	s = l.ForceConsume(l.Full(0), -7, 0)
	if s.Tokens != l.Capacity {
		t.Fatalf("ForceConsume(-7) tokens = %d, want unchanged %d", s.Tokens, l.Capacity)
	}
	// Repayment from the floor never overflows.
	got := l.Refill(State{Tokens: tokenbucket.MinMillitokens, LastRefill: 0}, math.MaxInt64)
	if got.Tokens < tokenbucket.MinMillitokens || got.Tokens > l.Capacity || got.LastRefill < 0 {
		t.Fatalf("Refill(floor, MaxInt64) = %+v out of range", got)
	}
}

func TestRefund(t *testing.T) {
	l := Limit{Capacity: 10_000, RefillAmount: 10_000, RefillPeriod: time.Second} // 10 mt/ms
	tests := []struct {
		name string
		s    State
		n    Millitokens
		at   int64
		want State
	}{
		{"partial refund keeps the refill clock", State{2000, 0}, 3000, 5, State{5050, 5}},
		{"refund with a carried remainder", State{2000, 0}, 3000, 0, State{5000, 0}},
		{"refund capped at capacity", State{2000, 0}, 50_000, 10, State{10_000, 10}},
		{"exact fill", State{2000, 0}, 8000, 0, State{10_000, 0}},
		{"refund of a full bucket", State{10_000, 0}, 1, 100, State{10_000, 100}},
		{"refund repays debt", State{-4000, 0}, 3000, 0, State{-1000, 0}},
		{"negative refund is zero", State{2000, 0}, -100, 0, State{2000, 0}},
		{"huge refund", State{tokenbucket.MinMillitokens, 0}, math.MaxInt64, 0, State{10_000, 0}},
		{"refund with the clock backwards", State{2000, 50}, 100_000, 10, State{10_000, 50}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := l.Refund(tt.s, tt.n, tt.at); got != tt.want {
				t.Errorf("Refund(%+v, %d, %d) = %+v, want %+v", tt.s, tt.n, tt.at, got, tt.want)
			}
		})
	}
}

func TestAvailable(t *testing.T) {
	l := Limit{Capacity: 5000, RefillAmount: 1, RefillPeriod: year}
	for _, tc := range []struct {
		tokens Millitokens
		want   int64
	}{
		{5000, 5}, {4999, 4}, {1000, 1}, {999, 0}, {1, 0}, {0, 0},
		{-1, -1}, {-999, -1}, {-1000, -1}, {-1001, -2},
		{tokenbucket.MinMillitokens, -4_611_686_018_427_388},
		{tokenbucket.MinMillitokens + 1, -4_611_686_018_427_388},
	} {
		if got := l.Available(State{tc.tokens, 0}, 0); got != tc.want {
			t.Errorf("Available(%d mt) = %d, want %d", tc.tokens, got, tc.want)
		}
	}
}

func TestRetryAfter(t *testing.T) {
	threePerMinute := Limit{Capacity: 3000, RefillAmount: 3000, RefillPeriod: time.Minute} // 20 ms per mt
	fast := Limit{Capacity: 1e15, RefillAmount: 1e15, RefillPeriod: year}                  // ≈31,709.8 mt per ms
	ms := time.Millisecond
	tests := []struct {
		name string
		l    Limit
		s    State
		n    Millitokens
		at   int64
		want time.Duration
	}{
		{"enough now", threePerMinute, State{3000, 0}, 3000, 0, 0},
		{"zero request", threePerMinute, State{0, 0}, 0, 0, 0},
		{"one token from empty", threePerMinute, State{0, 0}, 1000, 0, 20_001 * ms},
		{"one millitoken from empty", threePerMinute, State{0, 0}, 1, 0, 21 * ms},
		{"deficit after refill", threePerMinute, State{0, 0}, 1000, 10_000, 10_001 * ms},
		{"remainder is not counted", threePerMinute, State{0, 0}, 1000, 19, 20_001 * ms},
		{"debt adds to the deficit", threePerMinute, State{-2000, 0}, 1000, 0, 60_001 * ms},
		{"more than capacity waits for the whole deficit", threePerMinute, State{3000, 0}, 4000, 0, 20_001 * ms},
		{"clock behind the stored refill adds the lead", threePerMinute, State{0, 100}, 1000, 0, 20_101 * ms},
		{"clock behind, enough already", threePerMinute, State{1000, 100}, 1000, 0, 0},
		{"negative request is zero", threePerMinute, State{0, 0}, -10, 0, 0},
		{"negative request in debt waits for zero", threePerMinute, State{-1, 0}, -10, 0, 21 * ms},
		{"fast refill, one millitoken", fast, State{0, 0}, 1, 0, 1 * ms},
		{"fast refill, 31,710 mt", fast, State{0, 0}, 31_710, 0, 2 * ms},
		{"fast refill, 31,709 mt", fast, State{0, 0}, 31_709, 0, 1 * ms},
		{"full deficit of a huge year bucket", fast, State{0, 0}, 1e15, 0, time.Duration(year.Milliseconds()+1) * ms},
		{"request beyond MaxMillitokens", Limit{Capacity: 1, RefillAmount: 1, RefillPeriod: 10 * year},
			State{tokenbucket.MinMillitokens, 0}, math.MaxInt64, 0,
			time.Duration(math.MaxInt64)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.l.RetryAfter(tt.s, tt.n, tt.at); got != tt.want {
				t.Errorf("RetryAfter(%+v, %d, %d) = %v, want %v", tt.s, tt.n, tt.at, got, tt.want)
			}
		})
	}
}

func TestTimeToFull(t *testing.T) {
	threePerMinute := Limit{Capacity: 3000, RefillAmount: 3000, RefillPeriod: time.Minute}
	slow := Limit{Capacity: 1000, RefillAmount: 3, RefillPeriod: 10 * time.Millisecond}
	ms := time.Millisecond
	tests := []struct {
		name string
		l    Limit
		s    State
		at   int64
		want time.Duration
	}{
		{"full", threePerMinute, State{3000, 0}, 0, 0},
		{"above capacity", threePerMinute, State{9000, 0}, 0, 0},
		{"empty", threePerMinute, State{0, 0}, 0, 60_000 * ms},
		{"empty with a carried remainder", threePerMinute, State{0, 0}, 10, 59_990 * ms},
		{"in debt", threePerMinute, State{-3000, 0}, 0, 120_000 * ms},
		{"one millitoken missing", threePerMinute, State{2999, 0}, 0, 20 * ms},
		{"fractional rate rounds up", slow, State{999, 0}, 0, 4 * ms},
		{"fractional rate, two missing", slow, State{998, 0}, 0, 7 * ms},
		{"refilled meanwhile", threePerMinute, State{0, 0}, 60_000, 0},
		{"clock behind the refill", threePerMinute, State{0, 100}, 0, 60_100 * ms},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.l.TimeToFull(tt.s, tt.at)
			if got != tt.want {
				t.Fatalf("TimeToFull(%+v, %d) = %v, want %v", tt.s, tt.at, got, tt.want)
			}
			if got == 0 {
				return
			}
			end := tt.at + got.Milliseconds()
			if s := tt.l.Refill(tt.s, end); s.Tokens != tt.l.Capacity {
				t.Errorf("Refill(%+v, %d) = %+v, want full at now+TimeToFull", tt.s, end, s)
			}
			if s := tt.l.Refill(tt.s, end-1); s.Tokens == tt.l.Capacity {
				t.Errorf("Refill(%+v, %d) = %+v, want not yet full 1 ms before now+TimeToFull", tt.s, end-1, s)
			}
		})
	}
}

// bigFloor returns ⌊a·b/c⌋ in arbitrary precision.
func bigFloor(a, b, c int64) *big.Int {
	p := new(big.Int).Mul(big.NewInt(a), big.NewInt(b))
	return p.Div(p, big.NewInt(c)) // Euclidean division: floor for c > 0, p ≥ 0
}

// bigCeil returns ⌈a·b/c⌉ in arbitrary precision, for a, b ≥ 0 and c > 0.
func bigCeil(a, b, c int64) *big.Int {
	p := new(big.Int).Mul(big.NewInt(a), big.NewInt(b))
	p.Add(p, big.NewInt(c-1))
	return p.Div(p, big.NewInt(c))
}

// randomLimit draws a valid limit with periods from 1 ms to ten years and
// refill amounts up to 10^12 tokens per period, biased to the extremes.
func randomLimit(r *rand.Rand) Limit {
	pick := func(max int64) int64 {
		switch r.IntN(4) {
		case 0:
			return 1 + r.Int64N(min(max, 1000))
		case 1:
			return max - r.Int64N(min(max, 1000))
		default:
			return 1 + r.Int64N(max)
		}
	}
	rp := time.Duration(pick((10 * year).Milliseconds())) * time.Millisecond
	ra := Millitokens(pick(1e15))
	cp := Millitokens(pick(1e15))
	if r.IntN(8) == 0 {
		ra, cp = tokenbucket.MaxMillitokens, tokenbucket.MaxMillitokens
	}
	return Limit{Capacity: cp, RefillAmount: ra, RefillPeriod: rp}
}

// TestAgainstBig checks Refill, RetryAfter and TimeToFull against math/big
// for random limits up to 10^12 tokens per period and periods up to ten years.
func TestAgainstBig(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 200_000 {
		l := randomLimit(r)
		rp := l.RefillPeriod.Milliseconds()
		last := int64(1_700_000_000_000)
		held, owed := r.Int64N(int64(l.Capacity)+1), r.Int64N(int64(l.Capacity)+1)
		tokens := Millitokens(held - owed)
		if r.IntN(10) == 0 {
			tokens = tokenbucket.MinMillitokens
		}
		elapsed := r.Int64N((10 * year).Milliseconds() + 1)
		if r.IntN(3) == 0 {
			elapsed = r.Int64N(rp + 1)
		}
		now := last + elapsed
		s := State{Tokens: tokens, LastRefill: last}

		// Refill.
		got := l.Refill(s, now)
		add := bigFloor(elapsed, int64(l.RefillAmount), rp)
		missing := new(big.Int).Sub(big.NewInt(int64(l.Capacity)), big.NewInt(int64(tokens)))
		var want State
		if add.Cmp(missing) >= 0 {
			want = State{Tokens: l.Capacity, LastRefill: now}
		} else if add.Sign() == 0 {
			want = s
		} else {
			used := bigCeil(add.Int64(), rp, int64(l.RefillAmount))
			want = State{Tokens: tokens + Millitokens(add.Int64()), LastRefill: last + used.Int64()}
			if used.Int64() > elapsed {
				t.Fatalf("#%d: used %d ms > elapsed %d", i, used.Int64(), elapsed)
			}
		}
		if got != want {
			t.Fatalf("#%d: %+v.Refill(%+v, %d) = %+v, want %+v", i, l, s, now, got, want)
		}

		// RetryAfter.
		n := Millitokens(1 + r.Int64N(int64(l.Capacity)))
		ra := l.RetryAfter(s, n, now)
		wantRA := time.Duration(0)
		if n > got.Tokens {
			deficit := int64(n - got.Tokens)
			w := bigFloor(deficit, rp, int64(l.RefillAmount))
			w.Add(w, big.NewInt(1))
			w.Mul(w, big.NewInt(int64(time.Millisecond)))
			if w.IsInt64() {
				wantRA = time.Duration(w.Int64())
			} else {
				wantRA = time.Duration(math.MaxInt64)
			}
		}
		if ra != wantRA {
			t.Fatalf("#%d: %+v.RetryAfter(%+v, %d, %d) = %v, want %v", i, l, s, n, now, ra, wantRA)
		}

		// TimeToFull.
		ttf := l.TimeToFull(s, now)
		wantTTF := time.Duration(0)
		if got.Tokens < l.Capacity {
			need := bigCeil(int64(l.Capacity-got.Tokens), rp, int64(l.RefillAmount))
			need.Add(need, big.NewInt(got.LastRefill-now))
			need.Mul(need, big.NewInt(int64(time.Millisecond)))
			if need.IsInt64() {
				wantTTF = time.Duration(need.Int64())
			} else {
				wantTTF = time.Duration(math.MaxInt64)
			}
		}
		if ttf != wantTTF {
			t.Fatalf("#%d: %+v.TimeToFull(%+v, %d) = %v, want %v", i, l, s, now, ttf, wantTTF)
		}
	}
}

// TestRetryAfterSucceeds: a caller that waits RetryAfter and tries again is
// admitted, for any request up to the capacity.
func TestRetryAfterSucceeds(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 100_000 {
		l := randomLimit(r)
		now := r.Int64N(1 << 50)
		held, owed := r.Int64N(int64(l.Capacity)+1), r.Int64N(int64(l.Capacity)+1)
		s := State{
			Tokens:     Millitokens(held - owed),
			LastRefill: now - r.Int64N(l.RefillPeriod.Milliseconds()+1),
		}
		n := Millitokens(r.Int64N(int64(l.Capacity) + 1))
		w := l.RetryAfter(s, n, now)
		if w == time.Duration(math.MaxInt64) {
			continue // saturated: longer than any time.Duration, effectively never
		}
		if w%time.Millisecond != 0 || w < 0 {
			t.Fatalf("#%d: RetryAfter = %v, want a non-negative whole number of ms", i, w)
		}
		later := now + w.Milliseconds()
		if _, ok := l.TryConsume(s, n, later); !ok {
			t.Fatalf("#%d: %+v: RetryAfter(%+v, %d, %d) = %v, but TryConsume at %d refused", i, l, s, n, now, w, later)
		}
		if w == 0 {
			if _, ok := l.TryConsume(s, n, now); !ok {
				t.Fatalf("#%d: RetryAfter = 0 but TryConsume now refused", i)
			}
		}
	}
}

// TestExtremeInstants: a refill clock far ahead of nowMs, or instants at the
// ends of int64, saturate instead of wrapping.
func TestExtremeInstants(t *testing.T) {
	l := Limit{Capacity: 1, RefillAmount: 1, RefillPeriod: time.Millisecond}
	s := State{Tokens: tokenbucket.MinMillitokens, LastRefill: math.MaxInt64 - 4}
	if got, want := l.TimeToFull(s, math.MinInt64), time.Duration(math.MaxInt64); got != want {
		t.Errorf("TimeToFull(%+v, MinInt64) = %v, want %v", s, got, want)
	}
	if got, want := l.RetryAfter(s, 1, math.MinInt64), time.Duration(math.MaxInt64); got != want {
		t.Errorf("RetryAfter(%+v, 1, MinInt64) = %v, want %v", s, got, want)
	}
	s = State{Tokens: 0, LastRefill: math.MinInt64}
	if got, want := l.Refill(s, math.MaxInt64), (State{Tokens: 1, LastRefill: math.MaxInt64}); got != want {
		t.Errorf("Refill(%+v, MaxInt64) = %+v, want %+v", s, got, want)
	}
	s = State{Tokens: tokenbucket.MinMillitokens, LastRefill: math.MinInt64}
	got := l.Refill(s, math.MaxInt64)
	// 2^64−1 ms elapsed credit 2^64−1 mt, more than the 2^62+1 missing.
	if want := (State{Tokens: 1, LastRefill: math.MaxInt64}); got != want {
		t.Errorf("Refill(%+v, MaxInt64) = %+v, want %+v", s, got, want)
	}
	year10 := Limit{Capacity: tokenbucket.MaxMillitokens, RefillAmount: 1, RefillPeriod: 10 * year}
	got = year10.Refill(State{Tokens: tokenbucket.MinMillitokens, LastRefill: math.MinInt64}, math.MaxInt64)
	// ⌊(2^64−1)·1/(3,650 days in ms)⌋ millitokens, bought by a whole number of periods' worth of ms.
	add := new(big.Int).Div(new(big.Int).SetUint64(math.MaxUint64), big.NewInt((10 * year).Milliseconds()))
	if want := tokenbucket.MinMillitokens + Millitokens(add.Int64()); got.Tokens != want {
		t.Errorf("10-year Refill over all of int64 = %+v, want tokens %d", got, want)
	}
}

func TestCreditAndCreditTime(t *testing.T) {
	l, err := tokenbucket.Rate(3, time.Minute, 0) // 3000 millitokens per 60000 ms: 1 per 20 ms
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		from, to int64
		credit   Millitokens
		took     int64
	}{
		{100, 95, 0, 0},
		{100, 100, 0, 0},
		{100, 119, 0, 0},
		{100, 120, 1, 20},
		{100, 139, 1, 20},
		{0, 60_000, 3000, 60_000},
		{0, math.MaxInt64, Millitokens(math.MaxInt64 / 20), math.MaxInt64 / 20 * 20},
		// A span longer than MaxInt64 ms is taken exactly, then saturates.
		{math.MinInt64, math.MaxInt64, Millitokens(math.MaxUint64 / 20), math.MaxInt64},
	}
	for _, tt := range tests {
		if got := l.Credit(tt.from, tt.to); got != tt.credit {
			t.Errorf("Credit(%d, %d) = %d, want %d", tt.from, tt.to, got, tt.credit)
		}
		if got := l.CreditTime(tt.credit); got != tt.took {
			t.Errorf("CreditTime(%d) = %d, want %d", tt.credit, got, tt.took)
		}
	}
}
