package tokenbucket_test

import (
	"encoding/binary"
	"math"
	"math/big"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

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
		return tokenbucket.MaxMillitokens
	case 2:
		return -Millitokens(v)
	default:
		return Millitokens(new(big.Int).Rsh(new(big.Int).Mul(big.NewInt(int64(v)), big.NewInt(2*int64(l.Capacity))), 32).Int64())
	}
}

// FuzzOps runs any sequence of operations, at non-decreasing or arbitrary
// instants, from a bucket holding any amount at any instant: nothing panics;
// a bucket never holds more than its capacity; a refused TryConsume and the
// read-only functions change nothing; TryConsume, Charge and Refund move the
// whole millitokens held by exactly their amount (Refund up to the
// capacity); a clock going backwards credits nothing; waits are never
// negative.
func FuzzOps(f *testing.F) {
	f.Add(uint64(3000), uint64(3000), uint64(60_000), int64(3000), int64(0), false, []byte{0, 1, 0, 0, 0, 2, 5, 0, 0, 0})
	f.Add(uint64(1e15), uint64(1e15), uint64(31_536_000_000), int64(-1), int64(1_700_000_000_000), true, []byte{3, 255, 255, 255, 255, 1, 0, 0, 0, 128})
	f.Add(uint64(1), uint64(1), uint64(0), int64(math.MinInt64), int64(math.MaxInt64), true, []byte{4, 4, 4, 4, 4, 4, 4, 4, 4, 4})
	f.Add(uint64(10_000), uint64(3), uint64(9), int64(math.MaxInt64), int64(math.MinInt64), false, []byte{1, 9, 0, 0, 0, 7, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, cp, ra, rpMs uint64, tokens, last int64, arbitrary bool, ops []byte) {
		l := fuzzLimit(cp, ra, rpMs)
		s := holding(l, Millitokens(tokens), last)
		if absI(s.X).Cmp(tokenbucket.MaxLevel) > 0 {
			return
		}
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
			before := l.Tokens(s, now)
			if earlier := now - int64(dt%1000); earlier <= now && l.Tokens(s, earlier) > before {
				t.Fatalf("op %d: Tokens(%v, %d) = %d > Tokens at %d = %d: a clock going backwards credited", i, s.X, earlier, l.Tokens(s, earlier), now, before)
			}
			lv := tokenbucket.Stored(s)
			var want Millitokens
			switch op % 8 {
			case 0:
				if l.TryConsume(&lv, n, now) {
					want = before - max(n, 0)
				} else {
					if lv.Changed() || lv.State() != s {
						t.Fatalf("op %d: refused TryConsume(%d) changed the level", i, n)
					}
					want = before
				}
			case 1:
				l.Charge(&lv, n, now)
				want = max(before-max(n, 0), tokenbucket.MinMillitokens)
			case 2:
				l.ChargeBlind(&lv, n, now)
				want = max(before-max(n, 0), tokenbucket.MinMillitokens)
			case 3:
				l.Refund(&lv, n, now)
				want = min(before+max(n, 0), l.Capacity)
			case 4:
				l.Check(&lv, now)
				want = before
			case 5:
				if w := l.RetryAfter(s, n, now); w < 0 {
					t.Fatalf("op %d: RetryAfter = %v < 0", i, w)
				}
				want = before
			case 6:
				if w := l.TimeToFull(s, now); w < 0 {
					t.Fatalf("op %d: TimeToFull = %v < 0", i, w)
				}
				want = before
			case 7:
				if got := l.Available(s, now); got > int64(before)/1000 || got < int64(before)/1000-1 {
					t.Fatalf("op %d: Available = %d for %d mt", i, got, before)
				}
				want = before
			}
			if op%8 >= 4 && lv.Changed() {
				t.Fatalf("op %d (%d): a read changed the level", i, op%8)
			}
			next := lv.State()
			got := l.Tokens(next, now)
			if got > l.Capacity {
				t.Fatalf("op %d (%d): %d mt above capacity %d", i, op%8, got, l.Capacity)
			}
			if got != want && before > tokenbucket.MinMillitokens+tokenbucket.MaxMillitokens {
				t.Fatalf("op %d (%d, n %d) at %d: %d mt → %d, want %d", i, op%8, n, now, before, got, want)
			}
			if absI(next.X).Cmp(tokenbucket.MaxLevel) > 0 {
				return // past what a store holds
			}
			s = next
		}
	})
}

// FuzzNoOverCredit consumes at any instants, backwards and forwards: the
// millitokens admitted never exceed what the bucket held at its first
// instant plus refill up to the latest one, nor Capacity plus refill from
// the earliest instant to the latest.
func FuzzNoOverCredit(f *testing.F) {
	f.Add(uint64(3000), uint64(3), uint64(10), int64(0), int64(0), false, []byte{1, 0, 0, 0, 3, 0, 0, 0, 1, 0, 0, 0})
	f.Add(uint64(1e15), uint64(1e9), uint64(60_000), int64(0), int64(1_700_000_000_000), false, []byte{1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0})
	f.Add(uint64(1e15), uint64(1e15), uint64(31_536_000_000), int64(-1e15), int64(5), true, []byte{255, 255, 255, 255, 7, 0, 0, 0})
	f.Add(uint64(5), uint64(1), uint64(1), int64(math.MinInt64), int64(0), false, []byte{9, 9, 9, 9})
	f.Fuzz(func(t *testing.T, cp, ra, rpMs uint64, tokens, last int64, arbitrary bool, deltas []byte) {
		l := fuzzLimit(cp, ra, rpMs)
		start := holding(l, Millitokens(tokens), last)
		if absI(start.X).Cmp(tokenbucket.MaxLevel) > 0 {
			return
		}
		s := start
		now, earliest, latest := last, last, last
		r := &opReader{b: deltas}
		admitted := new(big.Int)
		for len(r.b) > 0 {
			d := r.u32()
			if arbitrary {
				now += int64(int32(d))
			} else {
				now += int64(d % (1 << 24))
			}
			earliest, latest = min(earliest, now), max(latest, now)
			n := Millitokens(1 + uint64(d)%uint64(l.Capacity))
			v := tokenbucket.Stored(s)
			if l.TryConsume(&v, n, now) {
				admitted.Add(admitted, big.NewInt(int64(n)))
			}
			s = v.State()
		}
		b := newBigLimit(l)
		spent := new(big.Int).Mul(admitted, b.rp)
		held := new(big.Int).Mul(big.NewInt(latest), b.ra) // latest·ra − X
		held.Sub(held, toBig(start.X))
		refill := new(big.Int).Mul(big.NewInt(latest-earliest), b.ra)
		capped := refill.Add(refill, b.cpRp)
		if spent.Sign() > 0 && (spent.Cmp(held) > 0 || spent.Cmp(capped) > 0) {
			t.Fatalf("%+v from %v: admitted %v mt over [%d, %d], more than held %v/%d or capacity + refill %v/%d",
				l, start.X, admitted, earliest, latest, held, l.RefillPeriod.Milliseconds(), capped, l.RefillPeriod.Milliseconds())
		}
	})
}

// FuzzRetryAfter: the wait is exact for any level, request and instant.
func FuzzRetryAfter(f *testing.F) {
	f.Add(uint64(3000), uint64(3000), uint64(60_000), int64(0), int64(1000), int64(0))
	f.Add(uint64(1e15), uint64(1e15), uint64(31_536_000_000), int64(-1e15), int64(1e15), int64(1_700_000_000_000))
	f.Add(uint64(1000), uint64(3), uint64(10), int64(999), int64(1000), int64(50))
	f.Add(uint64(1000), uint64(3), uint64(10), int64(-1), int64(-10), int64(math.MaxInt64))
	f.Fuzz(func(t *testing.T, cp, ra, rpMs uint64, tokens, n, now int64) {
		l := fuzzLimit(cp, ra, rpMs)
		s := holding(l, Millitokens(tokens), now)
		w := l.RetryAfter(s, Millitokens(n), now)
		b := newBigLimit(l)
		need := new(big.Int).Mul(big.NewInt(int64(min(max(Millitokens(n), 0), tokenbucket.MaxMillitokens))), b.rp)
		need.Sub(need, b.held(toBig(s.X), now))
		if want := msDuration(ceilDiv(need, b.ra)); w != want {
			t.Fatalf("%+v.RetryAfter(%v, %d, %d) = %v, want %v", l, s.X, n, now, w, want)
		}
		v := tokenbucket.Stored(s)
		ok := l.TryConsume(&v, Millitokens(n), now)
		if ok != (w == 0 && Millitokens(n) <= l.Capacity) {
			t.Fatalf("%+v: RetryAfter(%v, %d, %d) = %v but TryConsume now = %t", l, s.X, n, now, w, ok)
		}
		if w == 0 || Millitokens(n) > l.Capacity || w == time.Duration(math.MaxInt64) || now > math.MaxInt64-w.Milliseconds() {
			return
		}
		later := now + w.Milliseconds()
		v = tokenbucket.Stored(s)
		if !l.TryConsume(&v, Millitokens(n), later) {
			t.Fatalf("%+v: RetryAfter(%v, %d, %d) = %v, but TryConsume at %d refused", l, s.X, n, now, w, later)
		}
		v = tokenbucket.Stored(s)
		if l.TryConsume(&v, Millitokens(n), later-1) {
			t.Fatalf("%+v: RetryAfter(%v, %d, %d) = %v, but TryConsume 1 ms earlier admitted", l, s.X, n, now, w)
		}
	})
}
