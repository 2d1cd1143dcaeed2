package tokenbucket_test

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// TestHundredPerMinuteEveryMillisecond is the acceptance case of exact
// refill: 100 per minute asked every millisecond for ten minutes (t in
// [0, 600000] inclusive) admits the burst of 100 and one token every
// 600 ms: exactly 1,100, whether the store writes back every decision or
// only the levels that changed.
func TestHundredPerMinuteEveryMillisecond(t *testing.T) {
	l, err := tokenbucket.Rate(100, time.Minute, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, t0 := range []int64{0, 1_700_000_000_000, 32_503_680_000_000} {
		for _, writeAll := range []bool{false, true} {
			s := l.Full(t0)
			admitted := 0
			for ms := int64(0); ms <= 600_000; ms++ {
				v := tokenbucket.Stored(s)
				if l.TryConsume(&v, perToken, t0+ms) {
					admitted++
				}
				if writeAll || v.Changed() {
					s = v.State()
				}
			}
			if admitted != 1100 {
				t.Errorf("t0 %d, write all %t: admitted %d, want 1100", t0, writeAll, admitted)
			}
		}
	}
}

// TestSplitTime: for random limits, request sizes and call instants (many
// calls in one millisecond, long gaps), the millitokens admitted over
// [t0, t] never exceed Capacity + refill(t − t0), exactly; and when the
// caller asks one token at least once per token's refill time and drains
// the bucket at the end, they fall short of it by less than one token.
func TestSplitTime(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	for i := range 3000 {
		tokens := 2 + r.Int64N(50)
		l := Limit{
			Capacity:     Millitokens(tokens) * perToken,
			RefillAmount: Millitokens(1 + r.Int64N(100_000)),
			RefillPeriod: time.Duration(1+r.Int64N(10_000)) * ms,
		}
		if r.IntN(4) == 0 {
			l.RefillAmount = Millitokens(1 + r.Int64N(int64(tokenbucket.MaxMillitokens)))
			l.RefillPeriod = time.Duration(1+r.Int64N(tokenbucket.MaxPeriod.Milliseconds())) * ms
		}
		rp, ra := l.RefillPeriod.Milliseconds(), int64(l.RefillAmount)
		// Time to refill one token, in ms (at least 1).
		tau := max(1, (int64(perToken)*rp)/ra)
		// Gaps of at most tau, with no more than a token per ms: the lower
		// bound applies.
		steady := r.IntN(2) == 0 && ra <= int64(perToken)*rp
		t0 := int64(1_700_000_000_000) + r.Int64N(1<<30)
		s := l.Full(t0)
		now := t0
		var admitted Millitokens
		calls := 1 + r.IntN(400)
		for c := 0; c <= calls; c++ {
			if c > 0 {
				switch {
				case steady:
					now += r.Int64N(tau + 1)
				case r.IntN(3) == 0:
					// same millisecond
				case r.IntN(10) == 0:
					now += r.Int64N(100 * tau)
				default:
					now += r.Int64N(tau + 1)
				}
			}
			n := perToken
			if !steady {
				n = Millitokens(r.Int64N(int64(l.Capacity) + 1))
			}
			v := tokenbucket.Stored(s)
			if l.TryConsume(&v, n, now) {
				admitted += n
			}
			s = v.State()
		}
		if steady { // drain what is left at the end
			for {
				v := tokenbucket.Stored(s)
				if !l.TryConsume(&v, perToken, now) {
					break
				}
				admitted += perToken
				s = v.State()
			}
		}
		// admitted·rp ≤ Capacity·rp + (now − t0)·ra
		bound := new(big.Int).Mul(big.NewInt(int64(l.Capacity)), big.NewInt(rp))
		bound.Add(bound, new(big.Int).Mul(big.NewInt(now-t0), big.NewInt(ra)))
		got := new(big.Int).Mul(big.NewInt(int64(admitted)), big.NewInt(rp))
		if got.Cmp(bound) > 0 {
			t.Fatalf("#%d: %+v: %d calls over %d ms admitted %d mt, more than capacity + refill = %v/%d", i, l, calls, now-t0, admitted, bound, rp)
		}
		if steady {
			short := new(big.Int).Sub(bound, got)
			if short.Cmp(new(big.Int).Mul(big.NewInt(int64(perToken)), big.NewInt(rp))) >= 0 {
				t.Fatalf("#%d: %+v: %d steady calls over %d ms admitted %d mt, a token or more below capacity + refill = %v/%d", i, l, calls, now-t0, admitted, bound, rp)
			}
		}
	}
}

// TestRetryAfterExact: TryConsume(n) succeeds at now + RetryAfter(n) and, when
// the wait is positive, fails one millisecond earlier, for any n up to the
// capacity and any level.
func TestRetryAfterExact(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	waited := 0
	for i := range 200_000 {
		l := randomLimit(r)
		now := int64(1_700_000_000_000) + r.Int64N(1<<40)
		s := randomLevel(r, l, now)
		n := Millitokens(r.Int64N(int64(l.Capacity) + 1))
		if r.IntN(4) == 0 {
			n = l.Capacity - Millitokens(r.Int64N(min(int64(l.Capacity), 3)))
		}
		w := l.RetryAfter(s, n, now)
		if w == time.Duration(math.MaxInt64) {
			continue // saturated: longer than any time.Duration
		}
		if w < 0 || w%time.Millisecond != 0 {
			t.Fatalf("#%d: RetryAfter = %v, want a whole non-negative number of ms", i, w)
		}
		if w.Milliseconds() > 1<<61 {
			continue // beyond any clock in use
		}
		later := now + w.Milliseconds()
		v := tokenbucket.Stored(s)
		if !l.TryConsume(&v, n, later) {
			t.Fatalf("#%d: %+v: RetryAfter(%v, %d, %d) = %v, but TryConsume at %d refused", i, l, s.X, n, now, w, later)
		}
		if w == 0 {
			continue
		}
		waited++
		v = tokenbucket.Stored(s)
		if l.TryConsume(&v, n, later-1) {
			t.Fatalf("#%d: %+v: RetryAfter(%v, %d, %d) = %v, but TryConsume 1 ms earlier admitted", i, l, s.X, n, now, w)
		}
	}
	if waited < 50_000 {
		t.Fatalf("only %d draws had to wait", waited)
	}
}
