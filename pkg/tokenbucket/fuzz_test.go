package tokenbucket_test

import (
	"encoding/binary"
	"math"
	"math/big"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// fuzzLimit maps arbitrary fuzz inputs onto a valid limit: capacity and
// refill amount in [1, MaxMillitokens], period in [1 ms, ten years].
func fuzzLimit(cp, ra, rpMs uint64) Limit {
	maxMt := uint64(tokenbucket.MaxMillitokens)
	return Limit{
		Capacity:     Millitokens(1 + cp%maxMt),
		RefillAmount: Millitokens(1 + ra%maxMt),
		RefillPeriod: time.Duration(1+rpMs%uint64((10*year).Milliseconds())) * time.Millisecond,
	}
}

// opReader decodes a fuzz byte string into operations.
type opReader struct{ b []byte }

func (r *opReader) u8() (byte, bool) {
	if len(r.b) < 1 {
		return 0, false
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v, true
}

func (r *opReader) u32() uint32 {
	var buf [4]byte
	n := copy(buf[:], r.b)
	r.b = r.b[n:]
	return binary.LittleEndian.Uint32(buf[:])
}

// amount scales a 32-bit draw onto [0, 2·capacity], with rare extremes.
func amount(l Limit, sel byte, v uint32) Millitokens {
	switch sel % 8 {
	case 0:
		return Millitokens(v % 4)
	case 1:
		return math.MaxInt64
	case 2:
		return -Millitokens(v)
	default:
		// v/2^32 of two capacities, computed without overflow.
		return Millitokens(new(big.Int).Rsh(new(big.Int).Mul(big.NewInt(int64(v)), big.NewInt(2*int64(l.Capacity))), 32).Int64())
	}
}

// FuzzOps runs any sequence of operations, at non-decreasing or arbitrary
// instants, from any state: nothing panics, tokens never exceed capacity nor
// fall below MinMillitokens, LastRefill never moves back, and waits are never
// negative.
func FuzzOps(f *testing.F) {
	f.Add(uint64(3000), uint64(3000), uint64(60_000), int64(3000), int64(0), false, []byte{0, 1, 0, 0, 0, 2, 5, 0, 0, 0})
	f.Add(uint64(1e15), uint64(1e15), uint64(31_536_000_000), int64(-1), int64(1_700_000_000_000), true, []byte{3, 255, 255, 255, 255, 1, 0, 0, 0, 128})
	f.Add(uint64(1), uint64(1), uint64(0), int64(math.MinInt64), int64(math.MaxInt64), true, []byte{4, 4, 4, 4, 4, 4, 4, 4, 4, 4})
	f.Add(uint64(10_000), uint64(3), uint64(9), int64(math.MaxInt64), int64(math.MinInt64), false, []byte{1, 9, 0, 0, 0, 7, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, cp, ra, rpMs uint64, tokens, last int64, arbitrary bool, ops []byte) {
		l := fuzzLimit(cp, ra, rpMs)
		s := State{Tokens: Millitokens(tokens), LastRefill: last}
		now := last
		r := &opReader{b: ops}
		for i := 0; ; i++ {
			op, ok := r.u8()
			if !ok {
				break
			}
			v, dt := r.u32(), r.u32()
			switch {
			case op&0x80 != 0 && arbitrary:
				now = int64(uint64(dt) | uint64(v)<<32) // anywhere at all
			case arbitrary:
				now += int64(int32(dt)) // backwards or forwards
			default:
				now += int64(dt % (1 << 20))
			}
			n := amount(l, op>>3, v)
			prev := s
			switch op % 8 {
			case 0:
				s = l.Refill(s, now)
			case 1:
				s, _ = l.TryConsume(s, n, now)
			case 2:
				s = l.ForceConsume(s, n, now)
			case 3:
				s = l.Refund(s, n, now)
			case 4:
				l.Check(s, now)
				l.Available(s, now)
			case 5:
				if w := l.RetryAfter(s, n, now); w < 0 {
					t.Fatalf("op %d: RetryAfter(%+v, %d, %d) = %v < 0", i, s, n, now, w)
				}
			case 6:
				if w := l.TimeToFull(s, now); w < 0 {
					t.Fatalf("op %d: TimeToFull(%+v, %d) = %v < 0", i, s, now, w)
				}
			case 7:
				if got, want := l.Available(s, now), l.Refill(s, now).Tokens; got > int64(want)/1000 || got < int64(want)/1000-1 {
					t.Fatalf("op %d: Available(%+v, %d) = %d for %d mt", i, s, now, got, want)
				}
			}
			if op%8 > 3 {
				continue // read-only: s is unchanged
			}
			if s.Tokens > l.Capacity {
				t.Fatalf("op %d (%d): %+v from %+v at %d: tokens above capacity %d", i, op%8, s, prev, now, l.Capacity)
			}
			if s.Tokens < tokenbucket.MinMillitokens {
				t.Fatalf("op %d (%d): %+v from %+v at %d: tokens below MinMillitokens", i, op%8, s, prev, now)
			}
			if s.LastRefill < prev.LastRefill {
				t.Fatalf("op %d (%d): LastRefill moved back from %d to %d", i, op%8, prev.LastRefill, s.LastRefill)
			}
			if s != prev && s.LastRefill > max(prev.LastRefill, now) {
				t.Fatalf("op %d (%d): LastRefill %d ahead of both %d and now %d", i, op%8, s.LastRefill, prev.LastRefill, now)
			}
		}
	})
}

// FuzzNoOverCredit splits an interval into calls at arbitrary instants and
// checks that together they never credit more than one call over the whole
// span, which itself credits at most ⌊elapsed·RefillAmount/RefillPeriod⌋;
// with non-decreasing instants, splitting loses at most one millitoken per
// call.
func FuzzNoOverCredit(f *testing.F) {
	f.Add(uint64(3000), uint64(3), uint64(10), int64(0), int64(0), false, []byte{1, 0, 0, 0, 3, 0, 0, 0, 1, 0, 0, 0})
	f.Add(uint64(1e15), uint64(1e9), uint64(60_000), int64(0), int64(1_700_000_000_000), false, []byte{1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0})
	f.Add(uint64(1e15), uint64(1e15), uint64(31_536_000_000), int64(-1e15), int64(5), true, []byte{255, 255, 255, 255, 7, 0, 0, 0})
	f.Add(uint64(5), uint64(1), uint64(1), int64(math.MinInt64), int64(0), false, []byte{9, 9, 9, 9})
	f.Fuzz(func(t *testing.T, cp, ra, rpMs uint64, tokens, last int64, arbitrary bool, deltas []byte) {
		l := fuzzLimit(cp, ra, rpMs)
		start := State{Tokens: min(Millitokens(tokens), l.Capacity), LastRefill: last}
		s := start
		now, end := last, last
		r := &opReader{b: deltas}
		calls := 0
		for len(r.b) > 0 {
			d := r.u32()
			if arbitrary {
				now += int64(int32(d))
			} else {
				now += int64(d % (1 << 24))
			}
			if now > end {
				end = now
			}
			s = l.Refill(s, now)
			calls++
		}
		if calls == 0 {
			return
		}
		one := l.Refill(start, end)
		floor := max(start.Tokens, tokenbucket.MinMillitokens)
		credited := new(big.Int).Sub(big.NewInt(int64(s.Tokens)), big.NewInt(int64(floor)))
		oneCredit := new(big.Int).Sub(big.NewInt(int64(one.Tokens)), big.NewInt(int64(floor)))
		if credited.Cmp(oneCredit) > 0 {
			t.Fatalf("%+v from %+v: %d calls up to %d credited %v, one call credits %v", l, start, calls, end, credited, oneCredit)
		}
		bound := bigFloor(end-last, int64(l.RefillAmount), l.RefillPeriod.Milliseconds())
		if end < last { // cannot happen: end starts at last
			t.Fatalf("end %d before last %d", end, last)
		}
		if oneCredit.Cmp(bound) > 0 {
			t.Fatalf("%+v from %+v: one call to %d credited %v > ⌊elapsed·ra/rp⌋ = %v", l, start, end, oneCredit, bound)
		}
		if s.LastRefill > max(end, last) || s.LastRefill < last {
			t.Fatalf("%+v from %+v: LastRefill %d outside [%d, %d]", l, start, s.LastRefill, last, end)
		}
		if !arbitrary && one.Tokens < l.Capacity {
			lost := new(big.Int).Sub(oneCredit, credited)
			if lost.Cmp(big.NewInt(int64(calls))) > 0 {
				t.Fatalf("%+v from %+v: %d calls credited %v, one call %v: lost more than a millitoken per call", l, start, calls, credited, oneCredit)
			}
		}
	})
}

// FuzzRetryAfter: waiting RetryAfter is never too early, and the wait is
// exactly (⌊deficit·RefillPeriod/RefillAmount⌋ + 1) ms.
func FuzzRetryAfter(f *testing.F) {
	f.Add(uint64(3000), uint64(3000), uint64(60_000), int64(0), uint32(0), int64(1000), int64(0))
	f.Add(uint64(1e15), uint64(1e15), uint64(31_536_000_000), int64(-1e15), uint32(7), int64(1e15), int64(1_700_000_000_000))
	f.Add(uint64(1000), uint64(3), uint64(10), int64(999), uint32(9), int64(1000), int64(50))
	f.Add(uint64(1000), uint64(3), uint64(10), int64(-1), uint32(0), int64(-10), int64(0))
	f.Fuzz(func(t *testing.T, cp, ra, rpMs uint64, tokens int64, behind uint32, n, now int64) {
		l := fuzzLimit(cp, ra, rpMs)
		// behind is how far the refill clock trails now; read as signed, it
		// may also lead now (another writer's clock runs ahead).
		s := State{Tokens: max(min(Millitokens(tokens), l.Capacity), tokenbucket.MinMillitokens), LastRefill: now - int64(int32(behind))}
		if (int32(behind) > 0 && now < math.MinInt64+int64(int32(behind))) || (int32(behind) < 0 && now > math.MaxInt64+int64(int32(behind))) {
			s.LastRefill = now
		}
		w := l.RetryAfter(s, Millitokens(n), now)
		refilled := l.Refill(s, now)
		want := big.NewInt(0)
		if need := max(min(Millitokens(n), tokenbucket.MaxMillitokens), 0); need > refilled.Tokens {
			want = bigFloor(int64(need-refilled.Tokens), l.RefillPeriod.Milliseconds(), int64(l.RefillAmount))
			want.Add(want, big.NewInt(1))
			if refilled.LastRefill > now {
				want.Add(want, new(big.Int).Sub(big.NewInt(refilled.LastRefill), big.NewInt(now)))
			}
			want.Mul(want, big.NewInt(int64(time.Millisecond)))
		}
		if !want.IsInt64() {
			want.SetInt64(math.MaxInt64)
		}
		if int64(w) != want.Int64() {
			t.Fatalf("%+v.RetryAfter(%+v, %d, %d) = %d ns, want %v", l, s, n, now, w, want)
		}
		if w == 0 {
			if _, ok := l.TryConsume(s, Millitokens(n), now); !ok {
				t.Fatalf("%+v.RetryAfter(%+v, %d, %d) = 0 but TryConsume refused", l, s, n, now)
			}
			return
		}
		if _, ok := l.TryConsume(s, Millitokens(n), now); ok {
			t.Fatalf("%+v.RetryAfter(%+v, %d, %d) = %v but TryConsume admitted now", l, s, n, now, w)
		}
		if Millitokens(n) > l.Capacity || w == time.Duration(math.MaxInt64) || now > math.MaxInt64-w.Milliseconds() {
			return // can never succeed, or the wait is beyond any representable instant
		}
		later := now + w.Milliseconds()
		if _, ok := l.TryConsume(s, Millitokens(n), later); !ok {
			t.Fatalf("%+v.RetryAfter(%+v, %d, %d) = %v, but TryConsume at %d refused", l, s, n, now, w, later)
		}
	})
}
