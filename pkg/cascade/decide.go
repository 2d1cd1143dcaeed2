package cascade

import (
	"math"

	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// maxInline is the number of bucket states Decide keeps on the stack.
const maxInline = 8

// Decide decides plan p against the current states of its buckets at nowMs.
//
// states holds one state per distinct bucket limit of the plan, and slot[i] is
// the index in states of debit i's bucket limit (several debits may share a
// slot; they are then decided in order, each seeing the one before). On return
// states holds what the store must persist: refilled, debited if the plan was
// admitted, charged and refunded in any case. The caller must hold whatever
// lock or condition makes the load, Decide and the write atomic.
func Decide(p *Plan, slot []int, states []tokenbucket.State, nowMs int64) Decision {
	dec := Decision{Statuses: make([]Status, len(p.Debits))}
	var inline [maxInline]tokenbucket.State
	work := append(inline[:0], states...)
	for i := range p.Debits {
		d := &p.Debits[i]
		s := &work[slot[i]]
		dec.Statuses[i].OK = step(d, s, nowMs, true)
	}
	dec.Admitted = Admit(p.Debits, dec.Statuses)
	if dec.Admitted {
		copy(states, work)
	} else {
		// Refused: keep only what is applied regardless (charges, refunds) on
		// top of the refilled states.
		for i := range p.Debits {
			d := &p.Debits[i]
			s := &states[slot[i]]
			*s = d.Bucket.Refill(*s, nowMs)
			if d.Op == Charge || d.Op == Refund {
				step(d, s, nowMs, false)
			}
		}
	}
	for i := range p.Debits {
		d := &p.Debits[i]
		st := &dec.Statuses[i]
		s := states[slot[i]]
		st.Remaining = s.Tokens
		st.ResetAfter = d.Bucket.TimeToFull(s, nowMs)
		st.Bucket = d.Bucket
		if st.OK {
			continue
		}
		n := need(d)
		if !dec.Admitted {
			// Nothing was consumed, so the plan's other consumes of this
			// bucket are still ahead of the retry.
			n = demand(p, slot, slot[i])
		}
		st.RetryAfter = d.Bucket.RetryAfter(s, n, nowMs)
	}
	return dec
}

// demand is what bucket k must hold for a retry of the refused plan p to
// pass every debit p makes of it: the most that any of its debits needs on
// top of the consumes and charges of k that come before it in the plan.
func demand(p *Plan, slot []int, k int) tokenbucket.Millitokens {
	var before, most tokenbucket.Millitokens
	for j := range p.Debits {
		d := &p.Debits[j]
		if slot[j] != k || d.Op == Refund {
			continue
		}
		most = max(most, addSat(before, need(d)))
		if d.Op == Consume || d.Op == Charge {
			before = addSat(before, max(d.Amount, 0))
		}
	}
	return most
}

func addSat(a, b tokenbucket.Millitokens) tokenbucket.Millitokens {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// step applies debit d to *s (refilling first) and reports whether the
// bucket admitted it. With judge false the outcome is ignored.
func step(d *Debit, s *tokenbucket.State, nowMs int64, judge bool) bool {
	switch d.Op {
	case Consume:
		ns, ok := d.Bucket.TryConsume(*s, d.Amount, nowMs)
		*s = ns
		return ok
	case Check:
		*s = d.Bucket.Refill(*s, nowMs)
		return s.Tokens > 0
	case Charge:
		*s = d.Bucket.Refill(*s, nowMs)
		ok := !judge || s.Tokens > 0
		*s = d.Bucket.ForceConsume(*s, d.Amount, nowMs)
		return ok
	case Refund:
		*s = d.Bucket.Refund(*s, d.Amount, nowMs)
		return true
	}
	return false
}

// need is what a debit's bucket must hold to admit it: a consume's amount
// (zero for a non-positive one, as TryConsume), or one millitoken for checks
// and charges (admitted while the bucket holds more than zero).
func need(d *Debit) tokenbucket.Millitokens {
	if d.Op == Consume {
		return max(d.Amount, 0)
	}
	return 1
}
