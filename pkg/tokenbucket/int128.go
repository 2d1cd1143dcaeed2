package tokenbucket

import (
	"errors"
	"math"
	"math/bits"
	"strconv"
)

// Int128 is a signed 128-bit integer in two's complement: the width of a
// bucket's level (see Level). The zero value is 0. Arithmetic wraps like
// Go's integers; the package keeps every value it builds far inside the
// range (see doc.go), and ParseInt128 refuses what lies outside MaxLevel.
type Int128 struct {
	Hi int64
	Lo uint64
}

// Bounds of Int128.
var (
	MaxInt128 = Int128{Hi: math.MaxInt64, Lo: math.MaxUint64}
	MinInt128 = Int128{Hi: math.MinInt64}
)

// MaxLevel bounds the magnitude of a level that a store may hold: 10^38 − 1,
// the largest whole number DynamoDB's 38-digit numbers hold exactly, and
// about 2^126.2, so that adding one product of two int64 values can never
// wrap.
var MaxLevel = mustParse("99999999999999999999999999999999999999")

// I128 returns v as an Int128.
func I128(v int64) Int128 { return Int128{Hi: v >> 63, Lo: uint64(v)} }

// Mul returns a·b exactly.
func Mul(a, b int64) Int128 {
	neg := (a < 0) != (b < 0)
	hi, lo := bits.Mul64(absU(a), absU(b))
	r := Int128{Hi: int64(hi), Lo: lo}
	if neg {
		return r.Neg()
	}
	return r
}

func absU(v int64) uint64 {
	if v < 0 {
		return uint64(-v) // also right for MinInt64: 2^63
	}
	return uint64(v)
}

// Add returns a+b.
func (a Int128) Add(b Int128) Int128 {
	lo, c := bits.Add64(a.Lo, b.Lo, 0)
	return Int128{Hi: a.Hi + b.Hi + int64(c), Lo: lo}
}

// Sub returns a−b.
func (a Int128) Sub(b Int128) Int128 {
	lo, bw := bits.Sub64(a.Lo, b.Lo, 0)
	return Int128{Hi: a.Hi - b.Hi - int64(bw), Lo: lo}
}

// Neg returns −a.
func (a Int128) Neg() Int128 { return Int128{}.Sub(a) }

// Cmp returns −1, 0 or +1 as a is less than, equal to or greater than b.
func (a Int128) Cmp(b Int128) int {
	switch {
	case a.Hi < b.Hi:
		return -1
	case a.Hi > b.Hi:
		return 1
	case a.Lo < b.Lo:
		return -1
	case a.Lo > b.Lo:
		return 1
	}
	return 0
}

// Less reports a < b.
func (a Int128) Less(b Int128) bool { return a.Cmp(b) < 0 }

// Sign returns −1, 0 or +1.
func (a Int128) Sign() int {
	switch {
	case a.Hi < 0:
		return -1
	case a.Hi == 0 && a.Lo == 0:
		return 0
	}
	return 1
}

// IsZero reports a == 0.
func (a Int128) IsZero() bool { return a.Hi == 0 && a.Lo == 0 }

// Min returns the smaller of a and b.
func Min(a, b Int128) Int128 {
	if a.Less(b) {
		return a
	}
	return b
}

// Max returns the larger of a and b.
func Max(a, b Int128) Int128 {
	if b.Less(a) {
		return a
	}
	return b
}

// divFloor returns ⌊a/d⌋ for d > 0, saturated to the int64 range.
func (a Int128) divFloor(d int64) int64 {
	if a.Sign() >= 0 {
		q, _, ok := a.divU(uint64(d))
		if !ok {
			return math.MaxInt64
		}
		return q
	}
	// ⌊a/d⌋ = −⌈|a|/d⌉ for a < 0.
	q, r, ok := a.Neg().divU(uint64(d))
	if !ok || (r != 0 && q == math.MaxInt64) {
		return math.MinInt64 // ⌈|a|/d⌉ ≥ 2^63
	}
	if r != 0 {
		q++
	}
	return -q
}

// divCeil returns ⌈a/d⌉ for d > 0, saturated to the int64 range.
func (a Int128) divCeil(d int64) int64 {
	if a.Sign() < 0 {
		// ⌈a/d⌉ = −⌊|a|/d⌋ for a < 0.
		q, _, ok := a.Neg().divU(uint64(d))
		if !ok {
			return math.MinInt64 // ⌊|a|/d⌋ ≥ 2^63
		}
		return -q
	}
	q, r, ok := a.divU(uint64(d))
	if !ok || (r != 0 && q == math.MaxInt64) {
		return math.MaxInt64
	}
	if r != 0 {
		q++
	}
	return q
}

// divU divides a non-negative a (MinInt128's magnitude included) by d > 0;
// ok is false when the quotient exceeds MaxInt64.
func (a Int128) divU(d uint64) (q int64, r uint64, ok bool) {
	hi := uint64(a.Hi)
	if hi >= d {
		return 0, 0, false
	}
	qq, rr := bits.Div64(hi, a.Lo, d)
	if qq > math.MaxInt64 {
		return 0, 0, false
	}
	return int64(qq), rr, true
}

// String returns a in decimal.
func (a Int128) String() string {
	if (a.Hi == 0 && a.Lo < 1<<63) || (a.Hi == -1 && a.Lo >= 1<<63) {
		return strconv.FormatInt(int64(a.Lo), 10) // fits in int64
	}
	neg := a.Hi < 0
	hi, lo := uint64(a.Hi), a.Lo
	if neg {
		m := a.Neg()
		hi, lo = uint64(m.Hi), m.Lo
	}
	var buf [40]byte
	i := len(buf)
	const e19 = 10_000_000_000_000_000_000
	for hi != 0 {
		var r uint64
		qh := hi / e19
		hi, r = qh, hi%e19
		lo, r = bits.Div64(r, lo, e19)
		// r holds the low 19 digits of this round.
		for k := 0; k < 19; k++ {
			i--
			buf[i] = byte('0' + r%10)
			r /= 10
		}
	}
	// What is left is at least 1 (a magnitude past 2^64 leaves a quotient
	// of at least 1 after dividing by 10^19), so no leading zero is written.
	for lo != 0 {
		i--
		buf[i] = byte('0' + lo%10)
		lo /= 10
	}
	if neg {
		i--
		buf[i] = '-'
	}
	return string(buf[i:])
}

// ErrRange is returned by ParseInt128 for a number that is not a whole
// number or lies outside ±MaxLevel.
var ErrRange = errors.New("tokenbucket: level is not a whole number within ±(10^38−1)")

// ParseInt128 parses a decimal integer (an optional sign and digits) whose
// magnitude is at most MaxLevel.
func ParseInt128(s string) (Int128, error) {
	neg := false
	if s != "" && (s[0] == '-' || s[0] == '+') {
		neg = s[0] == '-'
		s = s[1:]
	}
	if s == "" || len(s) > 38 {
		return Int128{}, ErrRange
	}
	var v Int128
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return Int128{}, ErrRange
		}
		// v = v·10 + digit; 38 digits stay below 2^127.
		hi, lo := bits.Mul64(v.Lo, 10)
		v = Int128{Hi: v.Hi*10 + int64(hi), Lo: lo}.Add(I128(int64(c - '0')))
	}
	if neg {
		v = v.Neg()
	}
	return v, nil
}

func mustParse(s string) Int128 {
	v, err := ParseInt128(s)
	if err != nil {
		panic(err)
	}
	return v
}
