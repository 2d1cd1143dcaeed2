package tokenbucket_test

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// timedOp is an operation at an instant.
type timedOp struct {
	op
	at int64
}

func (o timedOp) String() string { return fmt.Sprintf("%c(%d)@%d", o.kind, o.n, o.at) }

// run applies ops to v and returns their outcomes.
func run(l Limit, v *Level, ops []timedOp) []bool {
	outs := make([]bool, len(ops))
	for i, o := range ops {
		outs[i] = o.apply(l, v, o.at)
	}
	return outs
}

// model runs ops on a stored level x in math/big, from the definition: the
// bucket holds min(Capacity·rp, t·ra − X)/rp; consuming, charging and
// refunding move X by n·rp after lifting a level below the full one to it;
// a check asks for no debt, a charge fits when a consume would.
func model(l Limit, x Int128, ops []timedOp) (outs []bool, final Int128, touched bool) {
	b := newBigLimit(l)
	X := toBig(x)
	lift := func(t int64) { // X = max(X, t·ra − Capacity·rp)
		base := new(big.Int).Mul(big.NewInt(t), b.ra)
		base.Sub(base, b.cpRp)
		if X.Cmp(base) < 0 {
			X.Set(base)
		}
	}
	span := func(n Millitokens) *big.Int { return new(big.Int).Mul(big.NewInt(int64(n)), b.rp) }
	for _, o := range ops {
		h := b.held(X, o.at)
		ok := true
		switch o.kind {
		case 'c':
			n := max(o.n, 0)
			ok = n <= l.Capacity && h.Cmp(span(n)) >= 0
			if ok && n > 0 {
				lift(o.at)
				X.Add(X, span(n))
				touched = true
			}
		case 'k':
			ok = h.Sign() >= 0
		case 'h', 'b':
			if o.kind == 'h' {
				n := max(o.n, 0)
				ok = n <= l.Capacity && h.Cmp(span(n)) >= 0
			}
			if o.n > 0 {
				lift(o.at)
				X.Add(X, span(o.n))
				touched = true
			}
		case 'r':
			if o.n > 0 {
				X.Sub(X, span(o.n))
				lift(o.at)
				touched = true
			}
		}
		outs = append(outs, ok)
	}
	return outs, fromBig(X), touched
}

// writeOf is what a conditional write sends: nothing, an ADD or a SET.
type writeOf struct {
	changed bool
	set     bool
	value   Int128
}

func writeFor(v *Level) writeOf {
	set, value := v.Write()
	return writeOf{v.Changed(), set, value}
}

// checkConditional checks the conditional-write property of ops on a
// bucket believed to hold x: for every stored level x' within the bounds,
// the same ops decide the same, write the same, and leave Apply(x'); just
// outside them (lo−1, hi+1), an outcome or the write differs. Every run is
// also checked against the model.
func checkConditional(t *testing.T, l Limit, x Int128, ops []timedOp, extra []Int128) {
	t.Helper()
	against := func(x Int128) (*Level, []bool) {
		v := tokenbucket.Stored(State{X: x})
		outs := run(l, &v, ops)
		mOuts, mFinal, touched := model(l, x, ops)
		if !slices.Equal(outs, mOuts) || v.State().X != mFinal {
			t.Fatalf("%+v from %v, %v: outcomes %v, level %v; model %v, %v", l, x, ops, outs, v.State().X, mOuts, mFinal)
		}
		if v.Changed() && !touched {
			t.Fatalf("%+v from %v, %v: Changed without a debit or credit", l, x, ops)
		}
		if !v.Changed() && v.State().X != x {
			t.Fatalf("%+v from %v, %v: level moved to %v but not Changed", l, x, ops, v.State().X)
		}
		if got := v.Apply(x); got != v.State().X {
			t.Fatalf("%+v from %v, %v: Apply(believed) = %v, State = %v", l, x, ops, got, v.State().X)
		}
		return &v, outs
	}
	v, outs := against(x)
	lo, hi := v.Bounds()
	if !v.Holds(x) {
		t.Fatalf("%+v from %v, %v: bounds [%v, %v] exclude the believed level", l, x, ops, lo, hi)
	}
	w := writeFor(v)
	one := tokenbucket.I128(1)
	cands := append([]Int128{lo, hi}, extra...)
	var outside []Int128
	if lo != tokenbucket.MinInt128 {
		outside = append(outside, lo.Sub(one))
		cands = append(cands, lo.Add(one))
	}
	if hi != tokenbucket.MaxInt128 {
		outside = append(outside, hi.Add(one))
		cands = append(cands, hi.Sub(one))
	}
	if lo != tokenbucket.MinInt128 && hi != tokenbucket.MaxInt128 {
		mid := new(big.Int).Add(toBig(lo), toBig(hi))
		cands = append(cands, fromBig(mid.Rsh(mid, 1)))
	}
	for _, y := range append(cands, outside...) {
		if y == tokenbucket.MinInt128 || y == tokenbucket.MaxInt128 || tokenbucket.MaxLevel.Add(tokenbucket.MaxLevel).Less(absI(y)) {
			continue // a sentinel, or a level no store holds
		}
		u, uOuts := against(y)
		same := slices.Equal(uOuts, outs) && writeFor(u) == w
		if v.Holds(y) {
			if !same || u.State().X != v.Apply(y) {
				t.Fatalf("%+v from %v, %v: bounds [%v, %v] hold %v, yet outcomes %v→%v, write %+v→%+v, level %v, Apply %v",
					l, x, ops, lo, hi, y, outs, uOuts, w, writeFor(u), u.State().X, v.Apply(y))
			}
			if ulo, uhi := u.Bounds(); ulo != lo || uhi != hi {
				t.Fatalf("%+v from %v, %v: bounds [%v, %v], from %v within them [%v, %v]", l, x, ops, lo, hi, y, ulo, uhi)
			}
		} else if slices.Contains(outside, y) && same {
			t.Fatalf("%+v from %v, %v: bounds [%v, %v] are not tight: %v decides and writes the same (%v, %+v)",
				l, x, ops, lo, hi, y, outs, w)
		}
	}
}

func absI(v Int128) Int128 {
	if v.Sign() < 0 {
		return v.Neg()
	}
	return v
}

// checkNew checks ops on New(s): the model's outcomes and level from s, a
// SET of it whenever debited or credited, and no condition.
func checkNew(t *testing.T, l Limit, s State, ops []timedOp) {
	t.Helper()
	v := tokenbucket.New(s)
	outs := run(l, &v, ops)
	mOuts, mFinal, touched := model(l, s.X, ops)
	if !slices.Equal(outs, mOuts) || v.State().X != mFinal {
		t.Fatalf("New %+v from %v, %v: outcomes %v, level %v; model %v, %v", l, s.X, ops, outs, v.State().X, mOuts, mFinal)
	}
	if v.Changed() != touched {
		t.Fatalf("New %+v from %v, %v: Changed = %t, want %t", l, s.X, ops, v.Changed(), touched)
	}
	if set, value := v.Write(); !set || value != mFinal {
		t.Fatalf("New %+v from %v, %v: Write = %t, %v, want SET %v", l, s.X, ops, set, value, mFinal)
	}
	if lo, hi := v.Bounds(); lo != tokenbucket.MinInt128 || hi != tokenbucket.MaxInt128 {
		t.Fatalf("New %+v: Bounds = [%v, %v], want unbounded", l, lo, hi)
	}
	for _, y := range []Int128{tokenbucket.MinInt128, tokenbucket.I128(0), s.X, tokenbucket.MaxInt128} {
		if !v.Holds(y) || v.Apply(y) != mFinal {
			t.Fatalf("New %+v: Holds(%v) = %t, Apply = %v, want true, %v", l, y, v.Holds(y), v.Apply(y), mFinal)
		}
	}
}

// randomOps draws up to eight operations around now with amounts around
// the capacity.
func randomOps(r *rand.Rand, l Limit, now int64) []timedOp {
	ops := make([]timedOp, 1+r.IntN(8))
	cp := int64(l.Capacity)
	for i := range ops {
		var n Millitokens
		switch r.IntN(8) {
		case 0:
			n = 0
		case 1:
			n = -Millitokens(1 + r.Int64N(100))
		case 2:
			n = l.Capacity + Millitokens(r.Int64N(3)) - 1
		case 3:
			n = Millitokens(1 + r.Int64N(min(cp, 3)))
		case 4:
			n = Millitokens(1 + r.Int64N(2*cp))
		default:
			n = Millitokens(1 + r.Int64N(cp))
		}
		at := now
		if r.IntN(4) == 0 {
			at += r.Int64N(2001) - 1000
		}
		ops[i] = timedOp{op{kind: "ckhbrc"[r.IntN(6)], n: n}, at}
	}
	return ops
}

// TestConditionalWrite is the property a store with conditional writes rests
// on (see Level), over random limits, stored levels and operations.
func TestConditionalWrite(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	for range 30_000 {
		l := randomLimit(r)
		if r.IntN(2) == 0 {
			l = Limit{Capacity: Millitokens(1 + r.Int64N(5000)), RefillAmount: Millitokens(1 + r.Int64N(5000)), RefillPeriod: time.Duration(1+r.Int64N(5000)) * ms}
		}
		now := int64(1_700_000_000_000) + r.Int64N(1<<30)
		s := randomLevel(r, l, now)
		ops := randomOps(r, l, now)
		extra := []Int128{randomLevel(r, l, now).X, randomLevel(r, l, now).X, s.X.Add(tokenbucket.I128(r.Int64N(2001) - 1000))}
		checkConditional(t, l, s.X, ops, extra)
		checkNew(t, l, s, ops)
	}
}

// TestLevel pins the write and bounds of single operations on a bucket of
// 10 per second at t = 1000 ms, where a full bucket's level is 0 and an
// empty one's 10^7 (one millitoken is 1000 of level).
func TestLevel(t *testing.T) {
	l := Limit{Capacity: 10_000, RefillAmount: 10_000, RefillPeriod: time.Second}
	const now = 1000
	i := tokenbucket.I128
	min, max := tokenbucket.MinInt128, tokenbucket.MaxInt128
	tests := []struct {
		name   string
		x      int64
		ops    []op
		outs   []bool
		write  writeOf
		lo, hi Int128
		level  int64
	}{
		{"consume from a full bucket: ADD, up to the level that still holds it",
			0, []op{consume(1000)}, []bool{true}, writeOf{true, false, i(1_000_000)}, i(0), i(9_000_000), 1_000_000},
		{"consume from a bucket full for long: SET",
			-5_000_000, []op{consume(1000)}, []bool{true}, writeOf{true, true, i(1_000_000)}, min, i(-1), 1_000_000},
		{"refused consume: conditional on not holding it",
			9_500_000, []op{consume(1000)}, []bool{false}, writeOf{}, i(9_000_001), max, 9_500_000},
		{"consume of more than the capacity: no condition at all",
			0, []op{consume(10_001)}, []bool{false}, writeOf{}, min, max, 0},
		{"consume of zero writes nothing",
			-5_000_000, []op{consume(0)}, []bool{true}, writeOf{}, min, i(10_000_000), -5_000_000},
		{"check of a bucket full for long writes nothing and does not clamp",
			-5_000_000, []op{check}, []bool{true}, writeOf{}, min, i(10_000_000), -5_000_000},
		{"check admitted at zero and below a millitoken",
			9_999_500, []op{check}, []bool{true}, writeOf{}, min, i(10_000_000), 9_999_500},
		{"check refused in debt",
			10_000_500, []op{check}, []bool{false}, writeOf{}, i(10_000_001), max, 10_000_500},
		{"charge above the capacity: lands, never fits",
			0, []op{charge(15_000)}, []bool{false}, writeOf{true, false, i(15_000_000)}, i(0), max, 15_000_000},
		{"charge that fits",
			0, []op{charge(4000)}, []bool{true}, writeOf{true, false, i(4_000_000)}, i(0), i(6_000_000), 4_000_000},
		{"charge that does not fit lands into debt",
			8_000_000, []op{charge(4000)}, []bool{false}, writeOf{true, false, i(4_000_000)}, i(6_000_001), max, 12_000_000},
		{"blind charge: only the form of the write is conditional",
			20_000_000, []op{blind(1000)}, nil, writeOf{true, false, i(1_000_000)}, i(0), max, 21_000_000},
		{"refund to the cap: SET, whatever a fuller bucket held",
			5_000_000, []op{refund(8000)}, nil, writeOf{true, true, i(0)}, min, i(7_999_999), 0},
		{"partial refund: ADD",
			5_000_000, []op{refund(2000)}, nil, writeOf{true, false, i(-2_000_000)}, i(2_000_000), max, 3_000_000},
		{"consume and refund it: nothing written",
			2_000_000, []op{consume(1000), refund(1000)}, []bool{true}, writeOf{}, i(0), i(9_000_000), 2_000_000},
		{"blind charge and a larger refund: one SET for the whole range",
			2_000_000, []op{blind(1000), refund(5000)}, nil, writeOf{true, true, i(0)}, min, i(3_999_999), 0},
		{"two consumes: the second bounds",
			0, []op{consume(4000), consume(4000)}, []bool{true, true}, writeOf{true, false, i(8_000_000)}, i(0), i(2_000_000), 8_000_000},
		{"a refused consume, then a smaller one",
			7_500_000, []op{consume(3000), consume(2000)}, []bool{false, true}, writeOf{true, false, i(2_000_000)}, i(7_000_001), i(8_000_000), 9_500_000},
		{"charge of the capacity, then a consume never fits",
			0, []op{blind(10_000), consume(1)}, []bool{false}, writeOf{true, false, i(10_000_000)}, i(0), max, 10_000_000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := tokenbucket.Stored(State{X: i(tt.x)})
			var outs []bool
			for _, o := range tt.ops {
				ok := o.apply(l, &v, now)
				if o.kind == 'c' || o.kind == 'k' || o.kind == 'h' {
					outs = append(outs, ok)
				}
			}
			lo, hi := v.Bounds()
			if !slices.Equal(outs, tt.outs) || writeFor(&v) != tt.write || lo != tt.lo || hi != tt.hi || v.State().X != i(tt.level) {
				t.Errorf("%v from %d = %v, write %+v, bounds [%v, %v], level %v; want %v, %+v, [%v, %v], %d",
					tt.ops, tt.x, outs, writeFor(&v), lo, hi, v.State().X, tt.outs, tt.write, tt.lo, tt.hi, tt.level)
			}
			var ops []timedOp
			for _, o := range tt.ops {
				ops = append(ops, timedOp{o, now})
			}
			checkConditional(t, l, i(tt.x), ops, nil)
		})
	}
}

func TestLevelRestart(t *testing.T) {
	l := Limit{Capacity: 10_000, RefillAmount: 10_000, RefillPeriod: time.Second}
	start := tokenbucket.Stored(State{X: tokenbucket.I128(5_000_000)}) // holds 5000 at 1000
	v := start
	if !l.TryConsume(&v, 2000, 1000) || l.TryConsume(&v, 4000, 1000) {
		t.Fatalf("TryConsume(2000), TryConsume(4000) from 5000: want admitted, refused")
	}
	back := v.Restart(start)
	if back.Changed() || back.State() != start.State() {
		t.Errorf("Restart: Changed %t, level %v, want unchanged %v", back.Changed(), back.State().X, start.State().X)
	}
	// Holding 5000: 2000 then 4000 is refused from 4000 down to 2000 held,
	// i.e. stored levels in [4_000_001, 8_000_000].
	if lo, hi := back.Bounds(); lo != tokenbucket.I128(4_000_001) || hi != tokenbucket.I128(8_000_000) {
		t.Errorf("Restart: Bounds = [%v, %v], want [4000001, 8000000]", lo, hi)
	}
	n := tokenbucket.New(l.Full(1000))
	if n.Changed() {
		t.Errorf("New: Changed before any operation")
	}
	if !l.Check(&n, 1000) || n.Changed() {
		t.Errorf("New: Check = false or Changed")
	}
	l.Refund(&n, 1, 1000)
	if !n.Changed() {
		t.Errorf("New after a refund: not Changed (a new bucket must be written once credited)")
	}
}

// fuzzLimit maps arbitrary fuzz inputs onto a valid limit.
func fuzzLimit(cp, ra, rpMs uint64) Limit {
	maxMt := uint64(tokenbucket.MaxMillitokens)
	return Limit{
		Capacity:     Millitokens(1 + cp%maxMt),
		RefillAmount: Millitokens(1 + ra%maxMt),
		RefillPeriod: time.Duration(1+rpMs%uint64(tokenbucket.MaxPeriod.Milliseconds())) * ms,
	}
}

// decodeOps reads operations from fuzz bytes: a kind and amount selector,
// a 32-bit amount and a signed step of the clock.
func decodeOps(l Limit, now int64, b []byte) []timedOp {
	var ops []timedOp
	for len(b) >= 6 && len(ops) < 16 {
		sel, v, dt := b[0], binary.LittleEndian.Uint32(b[1:5]), int8(b[5])
		b = b[6:]
		var n Millitokens
		switch (sel >> 3) % 8 {
		case 0:
			n = Millitokens(v % 4)
		case 1:
			n = math.MaxInt64
		case 2:
			n = -Millitokens(v)
		case 3:
			n = l.Capacity - Millitokens(v%3) + 1
		default: // v/2^32 of two capacities
			n = Millitokens(new(big.Int).Rsh(new(big.Int).Mul(big.NewInt(int64(v)), big.NewInt(2*int64(l.Capacity))), 32).Int64())
		}
		if sel&0x80 != 0 {
			now += int64(dt)
		}
		kind := "ckhbr"[int(sel%8)%5]
		if kind == 'b' && n == math.MaxInt64 {
			n = tokenbucket.MaxMillitokens // charges are bounded by MaxMillitokens
		}
		ops = append(ops, timedOp{op{kind: kind, n: n}, now})
	}
	return ops
}

// FuzzLevel runs the conditional-write property on any limit, stored level
// (held millitokens at now) and sequence of operations.
func FuzzLevel(f *testing.F) {
	f.Add(uint64(10_000), uint64(10_000), uint64(1000), int64(10_000), int64(1000), []byte{0, 0xe8, 3, 0, 0, 0, 4, 0xe8, 3, 0, 0, 0})
	f.Add(uint64(3000), uint64(3), uint64(10), int64(25_000), int64(1_700_000_000_000), []byte{2, 10, 0, 0, 0, 0, 4, 5, 0, 0, 0, 0, 0x80 | 1, 1, 0, 0, 0, 0xff})
	f.Add(uint64(1e15), uint64(1e15), uint64(1000), int64(-1e15), int64(32_503_680_000_000), []byte{1, 0, 0, 0, 0, 0, 0x18, 0, 0, 0, 0, 0, 4, 0xff, 0xff, 0xff, 0xff, 0})
	f.Add(uint64(1), uint64(1), uint64(math.MaxUint64), int64(math.MinInt64), int64(math.MaxInt64), []byte{3, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, cp, ra, rpMs uint64, held, now int64, data []byte) {
		l := fuzzLimit(cp, ra, rpMs)
		s := holding(l, Millitokens(held), now)
		ops := decodeOps(l, now, data)
		if absI(s.X).Cmp(tokenbucket.MaxLevel) > 0 {
			return // no store holds it
		}
		checkConditional(t, l, s.X, ops, []Int128{l.Full(now).X, l.Empty(now).X})
		checkNew(t, l, s, ops)
	})
}
