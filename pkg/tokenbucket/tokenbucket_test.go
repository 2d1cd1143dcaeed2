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
	Level       = tokenbucket.Level
	Millitokens = tokenbucket.Millitokens
)

const (
	perToken = tokenbucket.PerToken
	ms       = time.Millisecond
	day      = 24 * time.Hour
	week     = 7 * day
	month    = 30 * day
	year     = 365 * day
)

// holding returns the state of a bucket of l that holds tokens at t (more
// than the capacity: a full bucket that has been full for a while).
func holding(l Limit, tokens Millitokens, t int64) State {
	x := tokenbucket.Mul(t, int64(l.RefillAmount)).Sub(tokenbucket.Mul(int64(tokens), l.RefillPeriod.Milliseconds()))
	return State{X: x}
}

func TestNewLimit(t *testing.T) {
	max := tokenbucket.MaxMillitokens
	tests := []struct {
		name    string
		cp, ra  Millitokens
		rp      time.Duration
		wantErr error
	}{
		{"one millitoken per millisecond", 1, 1, time.Millisecond, nil},
		{"largest everything", max, max, tokenbucket.MaxPeriod, nil},
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
		{"MaxPeriod", 1, 1, tokenbucket.MaxPeriod, nil},
		{"MaxPeriod and a millisecond", 1, 1, tokenbucket.MaxPeriod + time.Millisecond, tokenbucket.ErrPeriod},
		{"capacity checked first", 0, 0, 0, tokenbucket.ErrCapacity},
		{"refill checked before period", 1, 0, 0, tokenbucket.ErrRefill},
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
			l := Limit{Capacity: tt.cp, RefillAmount: tt.ra, RefillPeriod: tt.rp}
			if err := l.Validate(); !errors.Is(err, tt.wantErr) {
				t.Errorf("%+v.Validate() = %v, want %v", l, err, tt.wantErr)
			}
		})
	}
	if err := (Limit{}).Validate(); err == nil {
		t.Errorf("zero Limit.Validate() = nil, want an error")
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
		{name: "10^12 per second", requests: 1e12, period: time.Second,
			want: Limit{Capacity: 1e15, RefillAmount: 1e15, RefillPeriod: time.Second}},
		{name: "10^12 per year", requests: 1e12, period: year,
			want: Limit{Capacity: 1e15, RefillAmount: 1e15, RefillPeriod: year}},
		{name: "one per 100 years", requests: 1, period: tokenbucket.MaxPeriod,
			want: Limit{Capacity: 1000, RefillAmount: 1000, RefillPeriod: tokenbucket.MaxPeriod}},
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
		{name: "period beyond MaxPeriod", requests: 1, period: tokenbucket.MaxPeriod + time.Millisecond, wantErr: true, errIs: tokenbucket.ErrPeriod},
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
			if got != tt.want {
				t.Errorf("Rate(%d, %v, %d) = %+v, want %+v", tt.requests, tt.period, tt.burst, got, tt.want)
			}
		})
	}
}

// TestRateUnits builds every envoyproxy/ratelimit unit with multipliers and
// checks that a drained bucket refills exactly one period later, and one
// token exactly period/requests later.
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
				const t0 = 1_700_000_000_000
				v := tokenbucket.Stored(l.Full(t0))
				if !l.TryConsume(&v, l.Capacity, t0) {
					t.Fatalf("%d per %d×%s: TryConsume(capacity) refused on a full bucket", requests, mult, u.name)
				}
				s := v.State()
				if s != l.Empty(t0) {
					t.Errorf("%d per %d×%s: drained = %v, want Empty", requests, mult, u.name, s.X)
				}
				pms := period.Milliseconds()
				if got := l.TimeToFull(s, t0); got != period {
					t.Errorf("%d per %d×%s: TimeToFull(empty) = %v, want %v", requests, mult, u.name, got, period)
				}
				if got := l.Tokens(s, t0+pms); got != l.Capacity {
					t.Errorf("%d per %d×%s: Tokens(+period) = %d, want capacity", requests, mult, u.name, got)
				}
				if got := l.Tokens(s, t0+pms-1); got >= l.Capacity {
					t.Errorf("%d per %d×%s: Tokens(+period−1ms) = %d, want below capacity", requests, mult, u.name, got)
				}
				// One token takes period/requests, rounded up to the millisecond.
				oneToken := (pms + int64(requests) - 1) / int64(requests)
				if got := l.RetryAfter(s, perToken, t0); got != time.Duration(oneToken)*ms {
					t.Errorf("%d per %d×%s: RetryAfter(empty, 1 token) = %v, want %d ms", requests, mult, u.name, got, oneToken)
				}
				if got := l.Available(s, t0+oneToken); got < 1 {
					t.Errorf("%d per %d×%s: Available after %d ms = %d, want ≥ 1", requests, mult, u.name, oneToken, got)
				}
			}
		}
	}
}

// op is one operation on a level at a fixed instant.
type op struct {
	kind byte // 'c' consume, 'k' check, 'h' charge, 'b' blind charge, 'r' refund, 0 read only
	n    Millitokens
}

func (o op) apply(l Limit, v *Level, now int64) bool {
	switch o.kind {
	case 'c':
		return l.TryConsume(v, o.n, now)
	case 'k':
		return l.Check(v, now)
	case 'h':
		return l.Charge(v, o.n, now)
	case 'b':
		l.ChargeBlind(v, o.n, now)
	case 'r':
		l.Refund(v, o.n, now)
	}
	return true
}

func consume(n Millitokens) op { return op{'c', n} }
func charge(n Millitokens) op  { return op{'h', n} }
func blind(n Millitokens) op   { return op{'b', n} }
func refund(n Millitokens) op  { return op{'r', n} }

var (
	check = op{kind: 'k'}
	read  = op{}
)

// step is one operation at a fixed instant: its outcome and the whole
// millitokens the bucket holds afterwards.
type step struct {
	name   string
	at     int64
	op     op
	ok     bool
	tokens Millitokens
}

// runSteps applies each step on the level a store would hold after the one
// before (Stored, the operation, State) and checks its outcome and tokens.
func runSteps(t *testing.T, l Limit, s State, steps []step) {
	t.Helper()
	for i, st := range steps {
		v := tokenbucket.Stored(s)
		ok := st.op.apply(l, &v, st.at)
		next := v.State()
		got := l.Tokens(next, st.at)
		if ok != st.ok || got != st.tokens {
			t.Fatalf("step %d (%s) at %d: %c(%d) = %t with %d mt, want %t with %d mt", i, st.name, st.at, st.op.kind, st.op.n, ok, got, st.ok, st.tokens)
		}
		if got > l.Capacity {
			t.Fatalf("step %d (%s): %d mt above capacity %d", i, st.name, got, l.Capacity)
		}
		if !v.Changed() && next != s {
			t.Fatalf("step %d (%s): level moved from %v to %v without a change", i, st.name, s.X, next.X)
		}
		s = next
	}
}

func TestSteps(t *testing.T) {
	tenPerSecond := Limit{Capacity: 10_000, RefillAmount: 10_000, RefillPeriod: time.Second}  // 10 mt/ms
	fractional := Limit{Capacity: 1000, RefillAmount: 3, RefillPeriod: 10 * time.Millisecond} // 0.3 mt/ms
	threePerMinute := Limit{Capacity: 3000, RefillAmount: 3000, RefillPeriod: time.Minute}    // 20 ms per mt
	tests := []struct {
		name  string
		l     Limit
		start State
		steps []step
	}{
		{"whole millitokens per millisecond", tenPerSecond, holding(tenPerSecond, 0, 1000), []step{
			{name: "same instant", at: 1000, op: read, ok: true, tokens: 0},
			{name: "one ms", at: 1001, op: read, ok: true, tokens: 10},
			{name: "half a second", at: 1500, op: read, ok: true, tokens: 5000},
			{name: "one ms short of full", at: 1999, op: read, ok: true, tokens: 9990},
			{name: "just full", at: 2000, op: read, ok: true, tokens: 10_000},
			{name: "full stays full", at: 5000, op: read, ok: true, tokens: 10_000},
			{name: "consume from a bucket full for a while", at: 5000, op: consume(5000), ok: true, tokens: 5000},
			{name: "a full bucket banked no time", at: 5001, op: read, ok: true, tokens: 5010},
		}},
		{"fractions are never lost", fractional, holding(fractional, 0, 0), []step{
			{name: "0.3 mt", at: 1, op: read, ok: true, tokens: 0},
			{name: "0.9 mt: check admitted (not in debt)", at: 3, op: check, ok: true, tokens: 0},
			{name: "1.2 mt: check admitted", at: 4, op: check, ok: true, tokens: 1},
			{name: "consume 1, 0.2 left", at: 4, op: consume(1), ok: true, tokens: 0},
			{name: "0.2 + 0.9", at: 7, op: consume(1), ok: true, tokens: 0},
			{name: "0.1 + 0.9 is exactly 1", at: 10, op: consume(1), ok: true, tokens: 0},
			{name: "nothing left in the same ms", at: 10, op: consume(1), ok: false, tokens: 0},
			{name: "3.3 mt after 11 ms", at: 21, op: consume(3), ok: true, tokens: 0},
		}},
		{"three per minute", threePerMinute, threePerMinute.Full(0), []step{
			{at: 0, op: consume(1000), ok: true, tokens: 2000},
			{at: 0, op: consume(1000), ok: true, tokens: 1000},
			{name: "refusal debits nothing", at: 0, op: consume(1001), ok: false, tokens: 1000},
			{at: 0, op: consume(1000), ok: true, tokens: 0},
			{at: 0, op: consume(1), ok: false, tokens: 0},
			{name: "zero fits an empty bucket", at: 0, op: consume(0), ok: true, tokens: 0},
			{name: "negative is zero", at: 0, op: consume(-50), ok: true, tokens: 0},
			{name: "0.95 mt", at: 19, op: consume(1), ok: false, tokens: 0},
			{at: 20, op: consume(1), ok: true, tokens: 0},
			{at: 20_020, op: consume(1000), ok: true, tokens: 0},
			{name: "more than capacity", at: 20_020, op: consume(4000), ok: false, tokens: 0},
			{name: "more than capacity from full", at: 1_000_000, op: consume(3001), ok: false, tokens: 3000},
			{at: 1_000_000, op: consume(3000), ok: true, tokens: 0},
			{name: "MaxInt64", at: 9_000_000, op: consume(math.MaxInt64), ok: false, tokens: 3000},
		}},
		{"clock going backwards credits nothing", tenPerSecond, holding(tenPerSecond, 500, 1000), []step{
			{name: "100 ms back: seen in debt", at: 900, op: read, ok: true, tokens: -500},
			{name: "check behind", at: 900, op: check, ok: false, tokens: -500},
			{name: "consume behind", at: 900, op: consume(0), ok: false, tokens: -500},
			{name: "forward again", at: 1010, op: consume(600), ok: true, tokens: 0},
			{name: "back again", at: 1000, op: read, ok: true, tokens: -100},
			{name: "far back saturates", at: math.MinInt64, op: read, ok: true, tokens: tokenbucket.MinMillitokens},
			{name: "far back refuses", at: math.MinInt64, op: consume(1), ok: false, tokens: tokenbucket.MinMillitokens},
			{name: "and forward", at: 1020, op: read, ok: true, tokens: 100},
		}},
		{"debt is repaid by refill", tenPerSecond, tenPerSecond.Full(0), []step{
			{name: "charge past zero lands, not fitting", at: 0, op: charge(15_000), ok: false, tokens: -5000},
			{name: "in debt: charge refused and applied", at: 0, op: charge(1000), ok: false, tokens: -6000},
			{name: "blind charge", at: 0, op: blind(1000), ok: true, tokens: -7000},
			{name: "negative charge is zero", at: 0, op: charge(-1000), ok: false, tokens: -7000},
			{name: "negative blind charge is zero", at: 0, op: blind(-1000), ok: true, tokens: -7000},
			{name: "zero needs no debt", at: 250, op: consume(0), ok: false, tokens: -4500},
			{name: "still in debt", at: 699, op: check, ok: false, tokens: -10},
			{name: "zero: no debt", at: 700, op: check, ok: true, tokens: 0},
			{name: "one millitoken", at: 701, op: check, ok: true, tokens: 10},
			{name: "full", at: 1700, op: read, ok: true, tokens: 10_000},
			{name: "and stays full", at: 1 << 50, op: read, ok: true, tokens: 10_000},
		}},
		{"refunds are capped at capacity", tenPerSecond, holding(tenPerSecond, 2000, 0), []step{
			{name: "partial refund", at: 5, op: refund(3000), ok: true, tokens: 5050},
			{name: "refund past capacity", at: 10, op: refund(50_000), ok: true, tokens: 10_000},
			{name: "drain", at: 10, op: consume(10_000), ok: true, tokens: 0},
			{name: "exact fill", at: 10, op: refund(10_000), ok: true, tokens: 10_000},
			{name: "refund of a full bucket", at: 10, op: refund(1), ok: true, tokens: 10_000},
			{name: "negative refund is zero", at: 10, op: refund(-100), ok: true, tokens: 10_000},
			{name: "into debt", at: 10, op: charge(14_000), ok: false, tokens: -4000},
			{name: "refund repays debt", at: 10, op: refund(3000), ok: true, tokens: -1000},
			{name: "huge refund", at: 10, op: refund(math.MaxInt64), ok: true, tokens: 10_000},
		}},
		{"a bucket full for long is clamped when written", tenPerSecond, holding(tenPerSecond, 25_000, 100), []step{
			{name: "holds the capacity", at: 100, op: read, ok: true, tokens: 10_000},
			{name: "check writes nothing", at: 100, op: check, ok: true, tokens: 10_000},
			{name: "consume from the capacity", at: 100, op: consume(1000), ok: true, tokens: 9000},
			{name: "one ms later", at: 101, op: read, ok: true, tokens: 9010},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { runSteps(t, tt.l, tt.start, tt.steps) })
	}
}

// TestSameMillisecond: 1,000,000 tokens per minute, 1,000 calls within one
// millisecond share its refill exactly.
func TestSameMillisecond(t *testing.T) {
	l, err := tokenbucket.Rate(1_000_000, time.Minute, 0)
	if err != nil {
		t.Fatal(err)
	}
	const t0 = 1_700_000_000_000
	s := l.Empty(t0)
	// 10^9 mt per 60,000 ms = 16,666.6… mt per ms.
	if got := l.Tokens(s, t0+1); got != 16_666 {
		t.Fatalf("Tokens(+1 ms) = %d, want 16666", got)
	}
	for i := range 16_666 {
		v := tokenbucket.Stored(s)
		if !l.TryConsume(&v, 1, t0+1) {
			t.Fatalf("call %d at t0+1: TryConsume(1) refused", i)
		}
		s = v.State()
	}
	v := tokenbucket.Stored(s)
	if l.TryConsume(&v, 1, t0+1) {
		t.Fatalf("call 16667 at t0+1 admitted, want refused (0.6 mt left)")
	}
	// The 0.6 mt left is kept: 2 more ms make 33,333.3 + 0.6 = 33,333.9.
	if got := l.Tokens(s, t0+3); got != 33_334 {
		t.Errorf("Tokens(+3 ms) = %d, want 33334 (50,000 made, 16,666 spent)", got)
	}
	if got := l.Tokens(s, t0+4); got != 50_000 {
		t.Errorf("Tokens(+4 ms) = %d, want 50000 (4 ms make exactly 66,666.6…, 16,666 spent)", got)
	}
}

func TestAvailable(t *testing.T) {
	l := Limit{Capacity: 5000, RefillAmount: 1, RefillPeriod: time.Millisecond}
	for _, tc := range []struct {
		tokens Millitokens
		want   int64
	}{
		{5000, 5}, {4999, 4}, {1000, 1}, {999, 0}, {1, 0}, {0, 0},
		{-1, -1}, {-999, -1}, {-1000, -1}, {-1001, -2},
		{tokenbucket.MinMillitokens, -4_611_686_018_427_388},
		{tokenbucket.MinMillitokens + 1, -4_611_686_018_427_388},
		{-tokenbucket.MaxMillitokens * 8, -4_611_686_018_427_388}, // saturated
	} {
		if got := l.Available(holding(l, tc.tokens, 0), 0); got != tc.want {
			t.Errorf("Available(%d mt) = %d, want %d", tc.tokens, got, tc.want)
		}
	}
}

// Equivalent mutants (see int128_internal_test.go), read by internal/mutants:
//
// mutant: CONDITIONALS_BOUNDARY tokenbucket.go `d.Sign() <= 0` until: a zero difference then yields ⌈0/ra⌉ ms = 0, as the early return ("enough now" below).
// mutant: CONDITIONALS_BOUNDARY tokenbucket.go `(a < 0)` floorDiv: a = 0 leaves no remainder, so the first conjunct already decides.
// mutant: CONDITIONALS_BOUNDARY tokenbucket.go `(b < 0)` floorDiv: the divisor is PerToken, never 0 (a zero divisor would have panicked on a/b).

func TestRetryAfter(t *testing.T) {
	threePerMinute := Limit{Capacity: 3000, RefillAmount: 3000, RefillPeriod: time.Minute} // 20 ms per mt
	fast := Limit{Capacity: 1e15, RefillAmount: 1e15, RefillPeriod: year}                  // ≈31,709.8 mt per ms
	tests := []struct {
		name string
		l    Limit
		s    State
		n    Millitokens
		at   int64
		want time.Duration
	}{
		{"enough now", threePerMinute, holding(threePerMinute, 3000, 0), 3000, 0, 0},
		{"zero request", threePerMinute, holding(threePerMinute, 0, 0), 0, 0, 0},
		{"one token from empty", threePerMinute, holding(threePerMinute, 0, 0), 1000, 0, 20_000 * ms},
		{"one millitoken from empty", threePerMinute, holding(threePerMinute, 0, 0), 1, 0, 20 * ms},
		{"deficit after refill", threePerMinute, holding(threePerMinute, 0, 0), 1000, 10_000, 10_000 * ms},
		{"the fraction already refilled counts", threePerMinute, holding(threePerMinute, 0, 0), 1000, 19, 19_981 * ms},
		{"debt adds to the deficit", threePerMinute, holding(threePerMinute, -2000, 0), 1000, 0, 60_000 * ms},
		{"more than capacity: as if uncapped, from full", threePerMinute, holding(threePerMinute, 3000, 0), 4000, 0, 20_000 * ms},
		{"more than capacity from a bucket full for long", threePerMinute, holding(threePerMinute, 9000, 0), 4000, 0, 20_000 * ms},
		{"clock behind the level", threePerMinute, holding(threePerMinute, 0, 100), 1000, 0, 20_100 * ms},
		{"clock behind sees less", threePerMinute, holding(threePerMinute, 1000, 100), 1000, 0, 100 * ms},
		{"negative request is zero", threePerMinute, holding(threePerMinute, 0, 0), -10, 0, 0},
		{"negative request in debt waits for zero", threePerMinute, holding(threePerMinute, -1, 0), -10, 0, 20 * ms},
		{"fast refill, one millitoken", fast, holding(fast, 0, 0), 1, 0, 1 * ms},
		{"fast refill, 31,710 mt", fast, holding(fast, 0, 0), 31_710, 0, 2 * ms},
		{"fast refill, 31,709 mt", fast, holding(fast, 0, 0), 31_709, 0, 1 * ms},
		{"a whole year", fast, holding(fast, 0, 0), 1e15, 0, year},
		{"request beyond MaxMillitokens is capped", Limit{Capacity: 1, RefillAmount: tokenbucket.MaxMillitokens, RefillPeriod: time.Millisecond},
			holding(Limit{Capacity: 1, RefillAmount: tokenbucket.MaxMillitokens, RefillPeriod: time.Millisecond}, 0, 0), math.MaxInt64, 0,
			1 * ms},
		{"the longest wait a Duration holds", Limit{Capacity: 1, RefillAmount: 1, RefillPeriod: time.Millisecond},
			holding(Limit{Capacity: 1, RefillAmount: 1, RefillPeriod: time.Millisecond}, -Millitokens(math.MaxInt64/int64(time.Millisecond)), 0), 0, 0,
			time.Duration(math.MaxInt64/int64(time.Millisecond)) * ms},
		{"a millisecond more saturates", Limit{Capacity: 1, RefillAmount: 1, RefillPeriod: time.Millisecond},
			holding(Limit{Capacity: 1, RefillAmount: 1, RefillPeriod: time.Millisecond}, -Millitokens(math.MaxInt64/int64(time.Millisecond)+1), 0), 0, 0,
			time.Duration(math.MaxInt64)},
		{"saturates in deep debt", Limit{Capacity: 1, RefillAmount: 1, RefillPeriod: tokenbucket.MaxPeriod},
			holding(Limit{Capacity: 1, RefillAmount: 1, RefillPeriod: tokenbucket.MaxPeriod}, -tokenbucket.MaxMillitokens, 0), 1, 0,
			time.Duration(math.MaxInt64)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.l.RetryAfter(tt.s, tt.n, tt.at); got != tt.want {
				t.Errorf("RetryAfter(%v, %d, %d) = %v, want %v", tt.s.X, tt.n, tt.at, got, tt.want)
			}
		})
	}
}

func TestTimeToFull(t *testing.T) {
	threePerMinute := Limit{Capacity: 3000, RefillAmount: 3000, RefillPeriod: time.Minute}
	slow := Limit{Capacity: 1000, RefillAmount: 3, RefillPeriod: 10 * time.Millisecond}
	tests := []struct {
		name string
		l    Limit
		s    State
		at   int64
		want time.Duration
	}{
		{"full", threePerMinute, holding(threePerMinute, 3000, 0), 0, 0},
		{"full for long", threePerMinute, holding(threePerMinute, 9000, 0), 0, 0},
		{"empty", threePerMinute, holding(threePerMinute, 0, 0), 0, 60_000 * ms},
		{"empty, 10 ms later", threePerMinute, holding(threePerMinute, 0, 0), 10, 59_990 * ms},
		{"in debt", threePerMinute, holding(threePerMinute, -3000, 0), 0, 120_000 * ms},
		{"one millitoken missing", threePerMinute, holding(threePerMinute, 2999, 0), 0, 20 * ms},
		{"fractional rate rounds up", slow, holding(slow, 999, 0), 0, 4 * ms},
		{"fractional rate, two missing", slow, holding(slow, 998, 0), 0, 7 * ms},
		{"refilled meanwhile", threePerMinute, holding(threePerMinute, 0, 0), 60_000, 0},
		{"clock behind the level", threePerMinute, holding(threePerMinute, 0, 100), 0, 60_100 * ms},
		{"saturates", Limit{Capacity: 1, RefillAmount: 1, RefillPeriod: tokenbucket.MaxPeriod},
			holding(Limit{Capacity: 1, RefillAmount: 1, RefillPeriod: tokenbucket.MaxPeriod}, -tokenbucket.MaxMillitokens, 0), 0,
			time.Duration(math.MaxInt64)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.l.TimeToFull(tt.s, tt.at)
			if got != tt.want {
				t.Fatalf("TimeToFull(%v, %d) = %v, want %v", tt.s.X, tt.at, got, tt.want)
			}
			if got == time.Duration(math.MaxInt64) {
				return
			}
			end := tt.at + got.Milliseconds()
			if got := tt.l.FullAt(tt.s); got > end || (tt.want > 0 && got != end) {
				t.Errorf("FullAt(%v) = %d, want %d", tt.s.X, got, end)
			}
			if tk := tt.l.Tokens(tt.s, end); tk != tt.l.Capacity {
				t.Errorf("Tokens at now+TimeToFull = %d, want full", tk)
			}
			if got == 0 {
				return
			}
			if tk := tt.l.Tokens(tt.s, end-1); tk == tt.l.Capacity {
				t.Errorf("Tokens 1 ms before now+TimeToFull = %d, want not yet full", tk)
			}
		})
	}
}

func TestFullAt(t *testing.T) {
	l := Limit{Capacity: 3000, RefillAmount: 3000, RefillPeriod: time.Minute}
	tests := []struct {
		name string
		s    State
		want int64
	}{
		{"full at t", l.Full(1000), 1000},
		{"empty at t", l.Empty(1000), 61_000},
		{"one millitoken short at 0", holding(l, 2999, 0), 20},
		{"in debt", holding(l, -3000, 0), 120_000},
		{"before the epoch", l.Empty(-60_000), 0},
	}
	for _, tt := range tests {
		if got := l.FullAt(tt.s); got != tt.want {
			t.Errorf("%s: FullAt(%v) = %d, want %d", tt.name, tt.s.X, got, tt.want)
		}
	}
}

// bigLimit is the arithmetic of a limit in math/big, written apart from
// the package: U = t·ra − X is what the bucket holds times rp, before the
// cap at Capacity·rp.
type bigLimit struct {
	cp, ra, rp *big.Int
	cpRp       *big.Int
}

func newBigLimit(l Limit) bigLimit {
	b := bigLimit{
		cp: big.NewInt(int64(l.Capacity)), ra: big.NewInt(int64(l.RefillAmount)),
		rp: big.NewInt(l.RefillPeriod.Milliseconds()),
	}
	b.cpRp = new(big.Int).Mul(b.cp, b.rp)
	return b
}

// held returns min(U, Capacity·rp) at t for level x.
func (b bigLimit) held(x *big.Int, t int64) *big.Int {
	u := new(big.Int).Mul(big.NewInt(t), b.ra)
	u.Sub(u, x)
	if u.Cmp(b.cpRp) > 0 {
		u.Set(b.cpRp)
	}
	return u
}

func ceilDiv(a, d *big.Int) *big.Int {
	q := new(big.Int).Neg(a)
	q.Div(q, d) // Euclidean: floor for d > 0
	return q.Neg(q)
}

func msDuration(v *big.Int) time.Duration {
	if v.Sign() <= 0 {
		return 0
	}
	ns := new(big.Int).Mul(v, big.NewInt(int64(time.Millisecond)))
	if !ns.IsInt64() {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(ns.Int64())
}

// randomLimit draws a valid limit with periods up to MaxPeriod and refill
// amounts up to MaxMillitokens, biased to the extremes.
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
	rp := time.Duration(pick(tokenbucket.MaxPeriod.Milliseconds())) * ms
	ra := Millitokens(pick(int64(tokenbucket.MaxMillitokens)))
	cp := Millitokens(pick(int64(tokenbucket.MaxMillitokens)))
	switch r.IntN(8) {
	case 0:
		ra, cp = tokenbucket.MaxMillitokens, tokenbucket.MaxMillitokens
	case 1:
		ra, cp = Millitokens(1+r.Int64N(1e15)), Millitokens(1+r.Int64N(1e15))
	}
	return Limit{Capacity: cp, RefillAmount: ra, RefillPeriod: rp}
}

// randomLevel draws a level of l at now: full, empty, in debt, full for
// long, or a clock ahead or behind.
func randomLevel(r *rand.Rand, l Limit, now int64) State {
	cp := int64(l.Capacity)
	switch r.IntN(6) {
	case 0:
		return l.Full(now)
	case 1:
		return l.Empty(now)
	case 2:
		return holding(l, Millitokens(cp-r.Int64N(min(cp, 3)+1)), now) // just below full
	case 3:
		return holding(l, Millitokens(cp+1+r.Int64N(cp)), now) // full for long
	case 4:
		return holding(l, Millitokens(r.Int64N(cp+1)-r.Int64N(cp+1)), now-r.Int64N(1000)+r.Int64N(1000))
	default:
		return holding(l, Millitokens(r.Int64N(cp+1)-r.Int64N(4*cp+1)), now) // in debt
	}
}

// TestAgainstBig checks Tokens, Available, RetryAfter, TimeToFull and FullAt
// against math/big for random limits, levels and instants.
func TestAgainstBig(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 200_000 {
		l := randomLimit(r)
		b := newBigLimit(l)
		now := int64(1_700_000_000_000) + r.Int64N(1<<40)
		if r.IntN(10) == 0 {
			now = randInt64(r)
		}
		s := randomLevel(r, l, now)
		if r.IntN(10) == 0 {
			s = randomLevel(r, l, randInt64(r))
		}
		x := toBig(s.X)
		h := b.held(x, now)

		wantTokens := max(bigDivFloor(h, b.rp), int64(tokenbucket.MinMillitokens))
		if got := l.Tokens(s, now); int64(got) != wantTokens {
			t.Fatalf("#%d: %+v.Tokens(%v, %d) = %d, want %d", i, l, x, now, got, wantTokens)
		}
		if got, want := l.Available(s, now), bigDivFloor(big.NewInt(wantTokens), big.NewInt(1000)); got != want {
			t.Fatalf("#%d: Available = %d, want %d", i, got, want)
		}

		n := Millitokens(r.Int64N(int64(l.Capacity) + 1))
		if r.IntN(8) == 0 {
			n = Millitokens(randInt64(r))
		}
		nn := min(max(n, 0), tokenbucket.MaxMillitokens)
		deficit := new(big.Int).Mul(big.NewInt(int64(nn)), b.rp)
		deficit.Sub(deficit, h)
		if got, want := l.RetryAfter(s, n, now), msDuration(ceilDiv(deficit, b.ra)); got != want {
			t.Fatalf("#%d: %+v.RetryAfter(%v, %d, %d) = %v, want %v", i, l, x, n, now, got, want)
		}

		u := new(big.Int).Mul(big.NewInt(now), b.ra)
		u.Sub(u, x)
		missing := new(big.Int).Sub(b.cpRp, u)
		if got, want := l.TimeToFull(s, now), msDuration(ceilDiv(missing, b.ra)); got != want {
			t.Fatalf("#%d: %+v.TimeToFull(%v, %d) = %v, want %v", i, l, x, now, got, want)
		}
		fullAt := new(big.Int).Add(x, b.cpRp)
		if got, want := l.FullAt(s), sat64(ceilDiv(fullAt, b.ra)); got != want {
			t.Fatalf("#%d: %+v.FullAt(%v) = %d, want %d", i, l, x, got, want)
		}
	}
}

// TestExtremeInstants: instants at the ends of int64, and levels built at
// one end and read at the other, saturate instead of wrapping.
func TestExtremeInstants(t *testing.T) {
	l := Limit{Capacity: 1000, RefillAmount: 1, RefillPeriod: tokenbucket.MaxPeriod}
	fast := Limit{Capacity: tokenbucket.MaxMillitokens, RefillAmount: tokenbucket.MaxMillitokens, RefillPeriod: time.Millisecond}
	for _, lim := range []Limit{l, fast} {
		for _, now := range []int64{math.MinInt64, math.MinInt64 + 1, -1, 0, 1, math.MaxInt64 - 1, math.MaxInt64} {
			full := lim.Full(now)
			if got := lim.Tokens(full, now); got != lim.Capacity {
				t.Errorf("%+v: Tokens(Full(%d)) = %d, want capacity", lim, now, got)
			}
			if got := lim.RetryAfter(full, lim.Capacity, now); got != 0 {
				t.Errorf("%+v: RetryAfter(Full(%d), capacity) = %v, want 0", lim, now, got)
			}
			if got := lim.TimeToFull(full, now); got != 0 {
				t.Errorf("%+v: TimeToFull(Full(%d)) = %v, want 0", lim, now, got)
			}
			if got := lim.FullAt(full); got != now {
				t.Errorf("%+v: FullAt(Full(%d)) = %d", lim, now, got)
			}
			v := tokenbucket.Stored(full)
			if !lim.TryConsume(&v, lim.Capacity, now) || v.State() != lim.Empty(now) {
				t.Errorf("%+v: draining Full(%d) = %v, want Empty", lim, now, v.State().X)
			}
			if got := lim.Tokens(lim.Empty(now), now); got != 0 {
				t.Errorf("%+v: Tokens(Empty(%d)) = %d, want 0", lim, now, got)
			}
		}
		// Built at one end, read at the other.
		// −(2^64−1)·ra/rp millitokens, floored and saturated.
		debt := new(big.Int).Mul(new(big.Int).Neg(new(big.Int).SetUint64(math.MaxUint64)), big.NewInt(int64(lim.RefillAmount)))
		want := max(bigDivFloor(debt, big.NewInt(lim.RefillPeriod.Milliseconds())), int64(tokenbucket.MinMillitokens))
		if got := lim.Tokens(lim.Empty(math.MaxInt64), math.MinInt64); int64(got) != want {
			t.Errorf("%+v: Tokens(Empty(MaxInt64), MinInt64) = %d, want %d", lim, got, want)
		}
		if got := lim.Tokens(lim.Empty(math.MinInt64), math.MaxInt64); got != lim.Capacity {
			t.Errorf("%+v: Tokens(Empty(MinInt64), MaxInt64) = %d, want capacity", lim, got)
		}
		if got := lim.RetryAfter(lim.Empty(math.MaxInt64), 1, math.MinInt64); got != time.Duration(math.MaxInt64) {
			t.Errorf("%+v: RetryAfter(Empty(MaxInt64), 1, MinInt64) = %v, want saturated", lim, got)
		}
		if got := lim.TimeToFull(lim.Empty(math.MaxInt64), math.MinInt64); got != time.Duration(math.MaxInt64) {
			t.Errorf("%+v: TimeToFull(Empty(MaxInt64), MinInt64) = %v, want saturated", lim, got)
		}
		if got := lim.RetryAfter(lim.Empty(math.MinInt64), lim.Capacity, math.MaxInt64); got != 0 {
			t.Errorf("%+v: RetryAfter(Empty(MinInt64), capacity, MaxInt64) = %v, want 0", lim, got)
		}
	}
	// A bucket in debt beyond any int64 instant: the wait saturates, and the
	// bucket is never full (it must not be forgotten).
	v := tokenbucket.Stored(l.Full(0))
	l.ChargeBlind(&v, tokenbucket.MaxMillitokens, 0)
	s := v.State()
	if got := l.RetryAfter(s, 1, 0); got != time.Duration(math.MaxInt64) {
		t.Errorf("RetryAfter(deep debt) = %v, want saturated", got)
	}
	if got := l.TimeToFull(s, 0); got != time.Duration(math.MaxInt64) {
		t.Errorf("TimeToFull(deep debt) = %v, want saturated", got)
	}
	if got := l.FullAt(s); got != math.MaxInt64 {
		t.Errorf("FullAt(deep debt) = %d, want MaxInt64", got)
	}
	// A full bucket at the very beginning of time holds what it holds.
	if got := l.RetryAfter(l.Full(math.MinInt64), 1, math.MinInt64); got != 0 {
		t.Errorf("RetryAfter(Full(MinInt64), 1, MinInt64) = %v, want 0", got)
	}
}

// TestMillennium: for clocks from 1970 to the year 3000, rates up to 10^12
// tokens per second and periods up to MaxPeriod, the levels a store holds
// (full, empty, drained by charges of a capacity a hundred times) stay
// within ±MaxLevel and survive a round trip through decimal.
func TestMillennium(t *testing.T) {
	const y3000 = 32_503_680_000_000 // unix ms
	limits := []Limit{
		{Capacity: 1e15, RefillAmount: 1e15, RefillPeriod: time.Second}, // 10^12 tokens per second
		{Capacity: 1e15, RefillAmount: 1e12, RefillPeriod: time.Millisecond},
		{Capacity: tokenbucket.MaxMillitokens, RefillAmount: 1, RefillPeriod: tokenbucket.MaxPeriod},
		{Capacity: 1, RefillAmount: 1e15, RefillPeriod: tokenbucket.MaxPeriod},
	}
	for _, l := range limits {
		for _, now := range []int64{0, 1_700_000_000_000, y3000} {
			v := tokenbucket.Stored(l.Full(now))
			for range 100 {
				l.ChargeBlind(&v, l.Capacity, now)
			}
			for _, s := range []State{l.Full(now), l.Empty(now), v.State()} {
				if s.X.Less(tokenbucket.MaxLevel.Neg()) || tokenbucket.MaxLevel.Less(s.X) {
					t.Errorf("%+v at %d: level %v outside ±MaxLevel", l, now, s.X)
				}
				back, err := tokenbucket.ParseInt128(s.X.String())
				if err != nil || back != s.X {
					t.Errorf("%+v at %d: ParseInt128(%s) = %v, %v", l, now, s.X, back, err)
				}
			}
		}
	}
}

// TestRestate: a bucket whose limit changes keeps its whole millitokens
// (debt included), not its level.
func TestRestate(t *testing.T) {
	perSecond := Limit{Capacity: 10_000, RefillAmount: 10_000, RefillPeriod: time.Second}
	perMinute := Limit{Capacity: 50_000, RefillAmount: 3000, RefillPeriod: time.Minute}
	const now = 1_700_000_000_000
	for _, held := range []Millitokens{10_000, 4321, 0, -2500} {
		s := holding(perSecond, held, now)
		if got := perSecond.Restate(s, perSecond, now); got != s {
			t.Errorf("Restate under the same limit = %v, want %v unchanged", got.X, s.X)
		}
		got := perMinute.Restate(s, perSecond, now)
		if tk := perMinute.Tokens(got, now); tk != held {
			t.Errorf("Restate(%d mt held) holds %d mt under the new limit", held, tk)
		}
		if got != holding(perMinute, held, now) {
			t.Errorf("Restate(%d mt held) = %v, want %v", held, got.X, holding(perMinute, held, now).X)
		}
	}
	// Fuller than the new capacity: the next operation clamps it.
	small := Limit{Capacity: 1000, RefillAmount: 1000, RefillPeriod: time.Second}
	got := small.Restate(perSecond.Full(now), perSecond, now)
	if tk := small.Tokens(got, now); tk != small.Capacity {
		t.Errorf("Restate(full 10,000 into capacity 1000) holds %d, want 1000", tk)
	}
}
