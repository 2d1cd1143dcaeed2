package tokenbucket

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// The divisions are exercised through FullAt and Tokens in the external
// tests; below −2^62 Tokens saturates, so their saturation edges are pinned
// here directly.

// Equivalent mutants. gremlins (make mutation) finds these alive, and no
// test can kill them: at the boundary the mutation moves, the mutated code
// computes what the code computes. Each boundary is pinned by a test all
// the same (0·MinInt64 and MinInt64's decimal in TestInt128Edges, a zero
// dividend in TestDivFloorCeil). The notes are read by internal/mutants.
//
// mutant: CONDITIONALS_BOUNDARY int128.go `a < 0` Mul: with a = 0 the sign flips, but the product is 0 and −0 = 0.
// mutant: CONDITIONALS_BOUNDARY int128.go `b < 0` Mul: with b = 0 the sign flips, but the product is 0 and −0 = 0.
// mutant: CONDITIONALS_BOUNDARY int128.go `v < 0` absU: uint64(−0) and uint64(0) are both 0.
// mutant: CONDITIONALS_BOUNDARY int128.go `a.Sign() >= 0` divFloor: a zero dividend taking the negative path gives −⌈0/d⌉ = 0, as ⌊0/d⌋.
// mutant: CONDITIONALS_BOUNDARY int128.go `a.Sign() < 0` divCeil: a zero dividend taking the negative path gives −⌊0/d⌋ = 0, as ⌈0/d⌉.
// mutant: CONDITIONALS_BOUNDARY int128.go `a.Lo >= 1<<63` String: the one value moved, MinInt64, then takes the general path, which also prints -9223372036854775808.

func bigOf(a Int128) *big.Int {
	v := new(big.Int).Lsh(big.NewInt(a.Hi), 64)
	return v.Add(v, new(big.Int).SetUint64(a.Lo))
}

func sat(v *big.Int) int64 {
	switch {
	case v.Cmp(big.NewInt(math.MaxInt64)) > 0:
		return math.MaxInt64
	case v.Cmp(big.NewInt(math.MinInt64)) < 0:
		return math.MinInt64
	}
	return v.Int64()
}

func TestDivFloorCeil(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 42))
	check := func(a Int128, d int64) {
		t.Helper()
		q, m := new(big.Int).DivMod(bigOf(a), big.NewInt(d), new(big.Int))
		if got, want := a.divFloor(d), sat(q); got != want {
			t.Fatalf("%v.divFloor(%d) = %d, want %d", bigOf(a), d, got, want)
		}
		if m.Sign() != 0 {
			q.Add(q, big.NewInt(1))
		}
		if got, want := a.divCeil(d), sat(q); got != want {
			t.Fatalf("%v.divCeil(%d) = %d, want %d", bigOf(a), d, got, want)
		}
	}
	for _, d := range []int64{1, 2, 3, 7, 1000, math.MaxInt64} {
		for _, q := range []int64{0, 1, -1, math.MaxInt64, math.MaxInt64 - 1, math.MinInt64, math.MinInt64 + 1} {
			for _, rem := range []int64{-1, 0, 1} {
				check(Mul(q, d).Add(I128(rem)), d)
			}
		}
		check(MinInt128, d)
		check(MaxInt128, d)
		check(MinInt128.Add(I128(1)), d)
	}
	for range 100_000 {
		a := Int128{Hi: int64(r.Uint64()) >> r.IntN(64), Lo: r.Uint64()}
		d := 1 + r.Int64N(math.MaxInt64)
		if r.IntN(2) == 0 {
			d = 1 + r.Int64N(1000)
		}
		check(a, d)
		check(a.Neg(), d)
	}
}
