package dynamo

import (
	"math"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// sym follows one limit of a bucket item through a decision the way
// tokenbucket and cascade.Decide do, with the stored token count tk as an
// unknown: the item may have changed since the image the store holds
// (another replica consumed). It computes the decision on a guess of tk and
// records, as bounds lo ≤ tk ≤ hi, every comparison that decided a branch.
// A conditional write on those bounds is then correct for any tk the item
// holds when the write lands: the decision and the stored result are those of
// cascade.Decide on that tk.
//
// While relative, the limit holds tk + off; once a branch fixes it (refill
// or a refund reaching capacity), it holds tok regardless of tk.
type sym struct {
	fixed  bool
	off    int64 // relative: tokens = tk + off; fixed: tokens = off
	last   int64 // last refill, unix ms
	lo, hi int64 // bounds on tk
	guess  int64
	used   int64 // consumed minus refunded, for tc

	// lazy skips crediting refill: the write consumes from tk as stored and
	// leaves lr alone, so it never conflicts with other consumers on lr.
	// Valid only while refill would not reach capacity (bounded below) and
	// every outcome is the one refill gives; spoiled records when not.
	lazy, spoiled bool
}

func newSym(im *image, prefix string, shape tokenbucket.Limit, nowMs int64) sym {
	l, present := im.has(prefix)
	if !present {
		f := startState(im, shape, nowMs)
		return sym{fixed: true, off: int64(f.Tokens), last: f.LastRefill, lo: math.MinInt64, hi: math.MaxInt64}
	}
	return sym{last: l.LastRefill, lo: math.MinInt64, hi: math.MaxInt64, guess: l.Tokens}
}

// startState is the state of a limit the item does not hold yet: full, or
// empty on a shard created by doubling (its share was already handed out).
func startState(im *image, shape tokenbucket.Limit, nowMs int64) tokenbucket.State {
	if im != nil && im.exists && im.empty {
		return tokenbucket.State{Tokens: 0, LastRefill: nowMs}
	}
	return shape.Full(nowMs)
}

func (s *sym) val() int64 {
	if s.fixed {
		return s.off
	}
	return s.guess + s.off
}

// geq decides tokens ≥ x on the guess and records the bound it implies.
func (s *sym) geq(x int64) bool {
	if s.fixed {
		return s.off >= x
	}
	t := subClamp(x, s.off)
	if s.guess+s.off >= x {
		s.lo = max(s.lo, t)
		return true
	}
	if t != math.MinInt64 {
		s.hi = min(s.hi, t-1)
	} else {
		s.hi = math.MinInt64 // impossible branch; the guess cannot take it
	}
	return false
}

func (s *sym) fix(tokens, last int64) { s.fixed, s.off, s.last = true, tokens, last }

// refill mirrors tokenbucket.Limit.Refill.
func (s *sym) refill(l tokenbucket.Limit, nowMs int64) {
	cp := int64(l.Capacity)
	if s.lazy {
		if s.fixed || s.geq(cp) {
			s.spoiled = true
		} else if nowMs > s.last {
			add := int64(l.Credit(s.last, nowMs))
			if s.geq(subClamp(cp, add)) {
				s.spoiled = true
			}
		}
		return
	}
	if s.geq(cp) {
		s.fix(cp, max(s.last, nowMs))
		return
	}
	if nowMs <= s.last {
		return
	}
	add := int64(l.Credit(s.last, nowMs))
	if s.geq(subClamp(cp, add)) {
		s.fix(cp, nowMs)
		return
	}
	if add == 0 {
		return
	}
	s.off += add
	s.last += l.CreditTime(tokenbucket.Millitokens(add))
}

// step mirrors cascade's step for debit d; judge false ignores the outcome.
func (s *sym) step(d *cascade.Debit, nowMs int64, judge bool) bool {
	n := max(int64(d.Amount), 0)
	switch d.Op {
	case cascade.Consume:
		s.refill(d.Bucket, nowMs)
		if !s.geq(n) {
			return false
		}
		s.off -= n
		s.used += n
		return true
	case cascade.Check:
		s.refill(d.Bucket, nowMs)
		return s.geq(1)
	case cascade.Charge:
		s.refill(d.Bucket, nowMs)
		ok := !judge || s.geq(1)
		s.refill(d.Bucket, nowMs) // ForceConsume refills again
		if s.fixed {
			s.off = int64(tokenbucket.Millitokens(s.off) - tokenbucket.Millitokens(n))
			s.off = max(s.off, int64(tokenbucket.MinMillitokens))
		} else {
			s.off -= n
		}
		s.used += n
		return ok
	case cascade.Refund:
		if s.lazy {
			s.spoiled = true // capping at capacity depends on the refill
		}
		s.refill(d.Bucket, nowMs)
		cp := int64(d.Bucket.Capacity)
		if s.geq(subClamp(cp, n)) {
			s.used -= cp - s.val()
			s.fix(cp, max(s.last, nowMs))
			return true
		}
		s.off += n
		s.used -= n
		return true
	}
	return false
}

func subClamp(a, b int64) int64 {
	r := a - b
	if (b > 0 && r > a) || (b < 0 && r < a) {
		if b > 0 {
			return math.MinInt64
		}
		return math.MaxInt64
	}
	return r
}
