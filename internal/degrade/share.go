package degrade

import (
	"math/bits"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// Demand is what a shared store can tell, without a call, of this
// replica's part of a bucket's recent demand: what it debited over what the
// fleet did, from 0 to 1, and whether it knows one. The DynamoDB store
// implements it.
type Demand interface {
	Demand(d *cascade.Debit) (part float64, known bool)
}

// portion is a replica's share of a limit, in parts of whole.
type portion int64

// whole is all of a limit: 4·720,720, a multiple of 4n for every n up to
// 16, so that 1/n and 1/(4n) are exact.
const whole portion = 2_882_880

// floorParts: a replica's share is at least 1/(floorParts·N), so that one
// with no recent demand still admits something. With it the shares of a
// fleet of N add up to at most 1 + (N−1)/(floorParts·N), below 1.25.
const floorParts = 4

// shareOf is this replica's share of d's limit in a fleet of n: its part
// of the bucket's recent demand (Demand), at least 1/(4n); 1/n when it
// knows none. A change of less than an eighth is not one (see limitOf).
func (s *Store) shareOf(d *cascade.Debit, n int) portion {
	if n <= 1 {
		return whole
	}
	even := whole / portion(n)
	dm, ok := s.shared.(Demand)
	if !ok {
		return even
	}
	part, known := dm.Demand(d)
	if !known || part != part { // NaN: none
		return even
	}
	floor := whole / portion(floorParts*n)
	return min(max(portion(part*float64(whole)), floor), whole)
}

// moved reports whether share q differs from p by more than an eighth of
// p: enough to remake a local bucket for.
func (p portion) moved(q portion) bool {
	d := q - p
	return d > p/8 || -d > p/8
}

// of is p's share of a.
func (p portion) of(a tokenbucket.Millitokens) tokenbucket.Millitokens {
	return mulDiv(a, int64(p), int64(whole))
}

// whole is what a, p's share of something, is of all of it (saturating).
func (p portion) whole(a tokenbucket.Millitokens) tokenbucket.Millitokens {
	return mulDiv(a, int64(whole), int64(max(p, 1)))
}

// mulDiv is a·m/d rounded toward zero, for m, d > 0, saturating at
// ±tokenbucket.MaxMillitokens.
func mulDiv(a tokenbucket.Millitokens, m, d int64) tokenbucket.Millitokens {
	neg := a < 0
	u := uint64(a)
	if neg {
		u = uint64(-a)
	}
	hi, lo := bits.Mul64(u, uint64(m))
	var q uint64
	if hi >= uint64(d) {
		q = uint64(tokenbucket.MaxMillitokens)
	} else {
		q, _ = bits.Div64(hi, lo, uint64(d))
	}
	r := tokenbucket.Millitokens(min(q, uint64(tokenbucket.MaxMillitokens)))
	if neg {
		return -r
	}
	return r
}

// scale returns b's share p for this replica: capacity and refill times p,
// but a capacity of at least one token (when b holds one), so that a small
// limit (2 a minute over 3 replicas) still admits a request on each
// replica rather than none anywhere, and a refill of at least a
// millitoken.
//
// A calendar budget's share is its total scaled the same way, granted per
// period as the shared one is.
func scale(b tokenbucket.Limit, p portion) tokenbucket.Limit {
	capacity := max(p.of(b.Capacity), min(b.Capacity, oneToken))
	if !b.Calendar.IsZero() {
		l, err := tokenbucket.Budget(capacity, b.Calendar, b.Carries())
		if err == nil {
			return l
		}
	}
	return tokenbucket.Limit{
		Capacity:     capacity,
		RefillAmount: max(p.of(b.RefillAmount), 1),
		RefillPeriod: b.RefillPeriod,
	}
}
