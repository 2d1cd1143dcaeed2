package tokenbucket_test

import (
	"errors"
	"math"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

type Int128 = tokenbucket.Int128

var (
	two64  = new(big.Int).Lsh(big.NewInt(1), 64)
	two127 = new(big.Int).Lsh(big.NewInt(1), 127)
	two128 = new(big.Int).Lsh(big.NewInt(1), 128)
)

// toBig returns a as a big.Int.
func toBig(a Int128) *big.Int {
	v := new(big.Int).Lsh(big.NewInt(a.Hi), 64)
	return v.Add(v, new(big.Int).SetUint64(a.Lo))
}

// fromBig returns v, which must lie in the Int128 range.
func fromBig(v *big.Int) Int128 {
	m := new(big.Int).Mod(v, two128) // two's complement bits
	lo := new(big.Int).And(m, new(big.Int).Sub(two64, big.NewInt(1))).Uint64()
	hi := new(big.Int).Rsh(m, 64).Uint64()
	return Int128{Hi: int64(hi), Lo: lo}
}

// wrap reduces v to the Int128 range, as two's complement arithmetic does.
func wrap(v *big.Int) *big.Int {
	m := new(big.Int).Mod(v, two128)
	if m.Cmp(two127) >= 0 {
		m.Sub(m, two128)
	}
	return m
}

// randInt64 draws an int64 biased to the edges and to small values.
func randInt64(r *rand.Rand) int64 {
	switch r.IntN(6) {
	case 0:
		return r.Int64N(2001) - 1000
	case 1:
		return math.MaxInt64 - r.Int64N(3)
	case 2:
		return math.MinInt64 + r.Int64N(3)
	default:
		return int64(r.Uint64())
	}
}

// randInt128 draws an Int128 biased to the edges, to small values and to
// int64 values.
func randInt128(r *rand.Rand) Int128 {
	switch r.IntN(7) {
	case 0:
		return tokenbucket.I128(randInt64(r))
	case 1:
		return tokenbucket.MaxInt128.Sub(tokenbucket.I128(r.Int64N(3)))
	case 2:
		return tokenbucket.MinInt128.Add(tokenbucket.I128(r.Int64N(3)))
	case 3:
		return tokenbucket.MaxLevel.Sub(tokenbucket.I128(r.Int64N(3)))
	case 4:
		return tokenbucket.MaxLevel.Neg().Add(tokenbucket.I128(r.Int64N(3)))
	case 5:
		return Int128{Hi: r.Int64N(5) - 2, Lo: r.Uint64()} // around the word boundary
	default:
		return Int128{Hi: int64(r.Uint64()), Lo: r.Uint64()}
	}
}

func TestInt128Constants(t *testing.T) {
	if got, want := toBig(tokenbucket.MaxInt128), new(big.Int).Sub(two127, big.NewInt(1)); got.Cmp(want) != 0 {
		t.Errorf("MaxInt128 = %v, want %v", got, want)
	}
	if got, want := toBig(tokenbucket.MinInt128), new(big.Int).Neg(two127); got.Cmp(want) != 0 {
		t.Errorf("MinInt128 = %v, want %v", got, want)
	}
	if got, want := tokenbucket.MaxLevel.String(), strings.Repeat("9", 38); got != want {
		t.Errorf("MaxLevel = %s, want %s", got, want)
	}
	if (Int128{}) != tokenbucket.I128(0) || !(Int128{}).IsZero() {
		t.Errorf("zero Int128 is not 0")
	}
	for _, v := range []int64{0, 1, -1, 42, -42, math.MaxInt64, math.MinInt64} {
		if got := toBig(tokenbucket.I128(v)); got.Cmp(big.NewInt(v)) != 0 {
			t.Errorf("I128(%d) = %v", v, got)
		}
	}
}

// TestInt128AgainstBig checks Mul, Add, Sub, Neg, Cmp, Less, Sign, IsZero,
// Min, Max and String against math/big.
func TestInt128AgainstBig(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for i := range 200_000 {
		x, y := randInt64(r), randInt64(r)
		p := tokenbucket.Mul(x, y)
		want := new(big.Int).Mul(big.NewInt(x), big.NewInt(y))
		if toBig(p).Cmp(want) != 0 {
			t.Fatalf("#%d: Mul(%d, %d) = %v, want %v", i, x, y, toBig(p), want)
		}

		a, b := randInt128(r), randInt128(r)
		ba, bb := toBig(a), toBig(b)
		if got, want := toBig(a.Add(b)), wrap(new(big.Int).Add(ba, bb)); got.Cmp(want) != 0 {
			t.Fatalf("#%d: %v.Add(%v) = %v, want %v", i, ba, bb, got, want)
		}
		if got, want := toBig(a.Sub(b)), wrap(new(big.Int).Sub(ba, bb)); got.Cmp(want) != 0 {
			t.Fatalf("#%d: %v.Sub(%v) = %v, want %v", i, ba, bb, got, want)
		}
		if got, want := toBig(a.Neg()), wrap(new(big.Int).Neg(ba)); got.Cmp(want) != 0 {
			t.Fatalf("#%d: %v.Neg() = %v, want %v", i, ba, got, want)
		}
		cmp := ba.Cmp(bb)
		if got := a.Cmp(b); got != cmp {
			t.Fatalf("#%d: %v.Cmp(%v) = %d, want %d", i, ba, bb, got, cmp)
		}
		if got := a.Less(b); got != (cmp < 0) {
			t.Fatalf("#%d: %v.Less(%v) = %t", i, ba, bb, got)
		}
		if got := a.Sign(); got != ba.Sign() {
			t.Fatalf("#%d: %v.Sign() = %d", i, ba, got)
		}
		if got := a.IsZero(); got != (ba.Sign() == 0) {
			t.Fatalf("#%d: %v.IsZero() = %t", i, ba, got)
		}
		lo, hi := a, b
		if cmp > 0 {
			lo, hi = b, a
		}
		if got := tokenbucket.Min(a, b); got != lo {
			t.Fatalf("#%d: Min(%v, %v) = %v", i, ba, bb, toBig(got))
		}
		if got := tokenbucket.Max(a, b); got != hi {
			t.Fatalf("#%d: Max(%v, %v) = %v", i, ba, bb, toBig(got))
		}
		if got := a.String(); got != ba.String() {
			t.Fatalf("#%d: String() = %s, want %s", i, got, ba.String())
		}
		if abs := new(big.Int).Abs(ba); abs.Cmp(toBig(tokenbucket.MaxLevel)) <= 0 {
			back, err := tokenbucket.ParseInt128(ba.String())
			if err != nil || back != a {
				t.Fatalf("#%d: ParseInt128(%s) = %v, %v, want %v", i, ba, toBig(back), err, ba)
			}
		}
	}
}

func TestInt128Edges(t *testing.T) {
	max, min := tokenbucket.MaxInt128, tokenbucket.MinInt128
	one := tokenbucket.I128(1)
	tests := []struct {
		name      string
		got, want Int128
	}{
		{"Max+1 wraps to Min", max.Add(one), min},
		{"Min−1 wraps to Max", min.Sub(one), max},
		{"−Min is Min", min.Neg(), min},
		{"−Max", max.Neg(), min.Add(one)},
		{"carry into the high word", Int128{Lo: math.MaxUint64}.Add(one), Int128{Hi: 1}},
		{"borrow from the high word", Int128{Hi: 1}.Sub(one), Int128{Lo: math.MaxUint64}},
		{"−1", tokenbucket.I128(0).Sub(one), Int128{Hi: -1, Lo: math.MaxUint64}},
		{"MinInt64²", tokenbucket.Mul(math.MinInt64, math.MinInt64), Int128{Hi: 1 << 62}},
		{"MinInt64·−1", tokenbucket.Mul(math.MinInt64, -1), Int128{Lo: 1 << 63}},
		{"MinInt64·1", tokenbucket.Mul(math.MinInt64, 1), tokenbucket.I128(math.MinInt64)},
		{"MaxInt64·MinInt64", tokenbucket.Mul(math.MaxInt64, math.MinInt64), fromBig(new(big.Int).Mul(big.NewInt(math.MaxInt64), big.NewInt(math.MinInt64)))},
		{"0·MinInt64", tokenbucket.Mul(0, math.MinInt64), Int128{}},
		{"−3·5", tokenbucket.Mul(-3, 5), tokenbucket.I128(-15)},
		{"−3·−5", tokenbucket.Mul(-3, -5), tokenbucket.I128(15)},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s = %v (%+v), want %v (%+v)", tt.name, toBig(tt.got), tt.got, toBig(tt.want), tt.want)
		}
	}
	for _, s := range []struct {
		v    Int128
		want string
	}{
		{Int128{}, "0"},
		{tokenbucket.I128(-1), "-1"},
		{tokenbucket.I128(math.MinInt64), "-9223372036854775808"},
		{tokenbucket.I128(math.MaxInt64), "9223372036854775807"},
		{Int128{Lo: 1 << 63}, "9223372036854775808"},
		{Int128{Hi: -1, Lo: 1<<63 - 1}, "-9223372036854775809"},
		{Int128{Lo: math.MaxUint64}, "18446744073709551615"},
		{Int128{Hi: 1}, "18446744073709551616"},
		{fromBig(new(big.Int).Exp(big.NewInt(10), big.NewInt(19), nil)), "10000000000000000000"},
		{fromBig(new(big.Int).Exp(big.NewInt(10), big.NewInt(38), nil)), "1" + strings.Repeat("0", 38)},
		{max, "170141183460469231731687303715884105727"},
		{min, "-170141183460469231731687303715884105728"},
	} {
		if got := s.v.String(); got != s.want {
			t.Errorf("%+v.String() = %s, want %s", s.v, got, s.want)
		}
	}
}

func TestParseInt128(t *testing.T) {
	nines := strings.Repeat("9", 38)
	tests := []struct {
		in      string
		want    string // "" when refused
		wantErr bool
	}{
		{in: "0", want: "0"},
		{in: "-0", want: "0"},
		{in: "+0", want: "0"},
		{in: "7", want: "7"},
		{in: "+7", want: "7"},
		{in: "-7", want: "-7"},
		{in: "0000000000000000000000000000000000042", want: "42"},
		{in: "9223372036854775808", want: "9223372036854775808"},
		{in: "-9223372036854775809", want: "-9223372036854775809"},
		{in: "18446744073709551616", want: "18446744073709551616"},
		{in: nines, want: nines},
		{in: "+" + nines, want: nines},
		{in: "-" + nines, want: "-" + nines},
		{in: "1" + strings.Repeat("0", 37), want: "1" + strings.Repeat("0", 37)},
		{in: "1" + strings.Repeat("0", 38), wantErr: true}, // 10^38: 39 digits
		{in: nines + "9", wantErr: true},
		{in: "-" + nines + "9", wantErr: true},
		{in: "0" + nines, wantErr: true}, // 39 characters, even with a leading zero
		{in: "170141183460469231731687303715884105727", wantErr: true},
		{in: "340282366920938463463374607431768211456", wantErr: true}, // 2^128 would wrap
		{in: "", wantErr: true},
		{in: "-", wantErr: true},
		{in: "+", wantErr: true},
		{in: "+-1", wantErr: true},
		{in: "--1", wantErr: true},
		{in: " 1", wantErr: true},
		{in: "1 ", wantErr: true},
		{in: "1.0", wantErr: true},
		{in: "1e3", wantErr: true},
		{in: "0x10", wantErr: true},
		{in: "12a", wantErr: true},
		{in: "１", wantErr: true}, // a full-width digit
		{in: "/", wantErr: true}, // '0'−1
		{in: ":", wantErr: true}, // '9'+1
	}
	for _, tt := range tests {
		got, err := tokenbucket.ParseInt128(tt.in)
		if tt.wantErr {
			if !errors.Is(err, tokenbucket.ErrRange) || got != (Int128{}) {
				t.Errorf("ParseInt128(%q) = %v, %v, want 0, ErrRange", tt.in, got, err)
			}
			continue
		}
		if err != nil || got.String() != tt.want {
			t.Errorf("ParseInt128(%q) = %v, %v, want %s", tt.in, got, err, tt.want)
		}
	}
	if v, err := tokenbucket.ParseInt128(nines); err != nil || v != tokenbucket.MaxLevel {
		t.Errorf("ParseInt128(MaxLevel) = %v, %v, want MaxLevel", v, err)
	}
	if v, err := tokenbucket.ParseInt128("-" + nines); err != nil || v != tokenbucket.MaxLevel.Neg() {
		t.Errorf("ParseInt128(−MaxLevel) = %v, %v, want −MaxLevel", v, err)
	}
}

// bigDivFloor returns ⌊a/d⌋ saturated to int64.
func bigDivFloor(a, d *big.Int) int64 {
	q, m := new(big.Int).DivMod(a, d, new(big.Int)) // Euclidean: floor for d > 0
	_ = m
	return sat64(q)
}

// bigDivCeil returns ⌈a/d⌉ saturated to int64.
func bigDivCeil(a, d *big.Int) int64 {
	n := new(big.Int).Neg(a)
	q := new(big.Int).Div(n, d)
	return sat64(q.Neg(q))
}

func sat64(v *big.Int) int64 {
	switch {
	case v.Cmp(big.NewInt(math.MaxInt64)) > 0:
		return math.MaxInt64
	case v.Cmp(big.NewInt(math.MinInt64)) < 0:
		return math.MinInt64
	}
	return v.Int64()
}

// TestDivisionAgainstBig exercises the 128-by-64-bit divisions through the
// functions that expose them: FullAt is ⌈(X + Capacity·RefillPeriod) /
// RefillAmount⌉ and Tokens is ⌊(t·RefillAmount − X) / RefillPeriod⌋ for a
// level above the full one, each saturated to int64.
func TestDivisionAgainstBig(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	for i := range 200_000 {
		// FullAt with Capacity = 1 and a 1 ms period: ⌈(X+1)/ra⌉ for any X.
		ra := randDivisor(r)
		l := Limit{Capacity: 1, RefillAmount: Millitokens(ra), RefillPeriod: time.Millisecond}
		x := randInt128(r)
		if x == tokenbucket.MaxInt128 {
			x = x.Sub(tokenbucket.I128(1))
		}
		want := bigDivCeil(new(big.Int).Add(toBig(x), big.NewInt(1)), big.NewInt(ra))
		if got := l.FullAt(State{X: x}); got != want {
			t.Fatalf("#%d: FullAt(%v) with ra %d = %d, want ⌈(X+1)/ra⌉ = %d", i, toBig(x), ra, got, want)
		}

		// Tokens with RefillAmount = 1 at t = 0: ⌊−X/rp⌋ for X ≥ −Capacity·rp.
		rp := 1 + r.Int64N(int64(tokenbucket.MaxPeriod/time.Millisecond))
		if r.IntN(4) == 0 {
			rp = 1 + r.Int64N(3)
		}
		l = Limit{Capacity: tokenbucket.MaxMillitokens, RefillAmount: 1, RefillPeriod: time.Duration(rp) * time.Millisecond}
		x = randInt128(r)
		bx := toBig(x)
		floorX := new(big.Int).Neg(new(big.Int).Mul(big.NewInt(int64(l.Capacity)), big.NewInt(rp)))
		if bx.Cmp(floorX) < 0 {
			bx = floorX // a fuller level reports the capacity
		}
		wantT := max(bigDivFloor(new(big.Int).Neg(bx), big.NewInt(rp)), int64(tokenbucket.MinMillitokens))
		if got := l.Tokens(State{X: x}, 0); int64(got) != wantT {
			t.Fatalf("#%d: Tokens(%v) with rp %d = %d, want %d", i, toBig(x), rp, got, wantT)
		}
	}
}

func randDivisor(r *rand.Rand) int64 {
	switch r.IntN(4) {
	case 0:
		return 1 + r.Int64N(3)
	case 1:
		return int64(tokenbucket.MaxMillitokens) - r.Int64N(3)
	default:
		return 1 + r.Int64N(int64(tokenbucket.MaxMillitokens))
	}
}

// TestDivisionEdges pins the exact values at which ⌊·⌋ and ⌈·⌉ saturate.
func TestDivisionEdges(t *testing.T) {
	one := Limit{Capacity: 1, RefillAmount: 1, RefillPeriod: time.Millisecond}
	two := Limit{Capacity: 1, RefillAmount: 2, RefillPeriod: time.Millisecond}
	i := tokenbucket.I128
	p63 := Int128{Lo: 1 << 63} // 2^63
	tests := []struct {
		name string
		l    Limit
		x    Int128 // FullAt is ⌈(x+1)/ra⌉
		want int64
	}{
		{"zero", one, i(-1), 0},
		{"MaxInt64 exactly", one, i(math.MaxInt64 - 1), math.MaxInt64},
		{"2^63 saturates", one, i(math.MaxInt64), math.MaxInt64},
		{"2^63/2 rounds to 2^62", two, i(math.MaxInt64 - 1), 1 << 62},
		{"(2^64−1)/2 rounds up to 2^63−1+1: saturates", two, Int128{Lo: math.MaxUint64 - 1}, math.MaxInt64},
		{"(2^64−2)/2 is MaxInt64", two, Int128{Lo: math.MaxUint64 - 2}, math.MaxInt64},
		{"(2^64−3)/2 rounds up to MaxInt64", two, Int128{Lo: math.MaxUint64 - 3}, math.MaxInt64},
		{"(2^64−4)/2 is MaxInt64−1", two, Int128{Lo: math.MaxUint64 - 4}, math.MaxInt64 - 1},
		{"far above", one, tokenbucket.MaxLevel, math.MaxInt64},
		{"MinInt64 exactly", one, i(math.MinInt64).Sub(i(1)), math.MinInt64},
		{"below MinInt64 saturates", one, i(math.MinInt64).Sub(i(2)), math.MinInt64},
		{"−2^63/2 rounds to −2^62", two, i(math.MinInt64).Sub(i(1)), -(1 << 62)},
		{"−(2^64+1)/2 rounds up to −2^63", two, Int128{Hi: -1}.Sub(i(2)), math.MinInt64},
		{"−(2^64+2)/2 saturates", two, Int128{Hi: -1}.Sub(i(3)), math.MinInt64},
		{"MinInt128 saturates", one, tokenbucket.MinInt128, math.MinInt64},
		{"2^63−1 over 2 rounds up", two, p63.Sub(i(2)), 1 << 62},
	}
	for _, tt := range tests {
		if got := tt.l.FullAt(State{X: tt.x}); got != tt.want {
			t.Errorf("%s: FullAt(%v) ra=%d = %d, want %d", tt.name, toBig(tt.x), tt.l.RefillAmount, got, tt.want)
		}
	}
	// Tokens at the low edge: ⌊−X/rp⌋ saturates to MinInt64 and then to the
	// MinMillitokens floor.
	l := Limit{Capacity: 1, RefillAmount: 1, RefillPeriod: 2 * time.Millisecond}
	for _, tc := range []struct {
		x    Int128
		want Millitokens
	}{
		{i(-2), 1},
		{i(-1), 0},
		{i(0), 0},
		{i(1), -1},
		{i(2), -1},
		{i(3), -2},
		{Int128{Lo: math.MaxUint64}, tokenbucket.MinMillitokens},
		{tokenbucket.MaxInt128, tokenbucket.MinMillitokens},
	} {
		if got := l.Tokens(State{X: tc.x}, 0); got != tc.want {
			t.Errorf("Tokens(X=%v, rp 2 ms) = %d, want %d", toBig(tc.x), got, tc.want)
		}
	}
}
