package cascade

import (
	"math"

	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// maxInline is the number of bucket levels Decide keeps on the stack.
const maxInline = 8

// Decide decides plan p at nowMs on the levels of its buckets.
//
// levels holds one level per distinct bucket limit of the plan (see
// tokenbucket.Stored and tokenbucket.New), and slot[i] is the index in levels
// of debit i's bucket limit (several debits may share a slot; they are then
// decided in order, each seeing the one before). On return each level holds
// what the store must persist: debited if the plan was admitted, charged and
// refunded in any case, and the range of stored levels for which this is
// the decision (a store with conditional writes makes that range its
// condition; a store under a lock ignores it). The caller must hold whatever
// lock or condition makes the load, Decide and the write atomic.
func Decide(p *Plan, slot []int, levels []tokenbucket.Level, nowMs int64) Decision {
	dec := Decision{Statuses: make([]Status, len(p.Debits))}
	var inline [maxInline]tokenbucket.Level
	work := append(inline[:0], levels...)
	for i := range p.Debits {
		dec.Statuses[i].OK = step(&p.Debits[i], &work[slot[i]], nowMs)
	}
	dec.Admitted = Admit(p.Debits, dec.Statuses)
	if dec.Admitted {
		copy(levels, work)
	} else {
		// Refused: only what is applied regardless (charges, refunds) stays,
		// on the levels as they were, under the conditions that refused.
		for j := range levels {
			levels[j] = work[j].Restart(levels[j])
		}
		for i := range p.Debits {
			d := &p.Debits[i]
			switch d.Op {
			case Charge:
				d.Bucket.ChargeBlind(&levels[slot[i]], d.Amount, nowMs)
			case Refund:
				d.Bucket.Refund(&levels[slot[i]], d.Amount, nowMs)
			}
		}
	}
	var demands []tokenbucket.Millitokens
	if !dec.Admitted {
		demands = demand(p, slot, len(levels))
	}
	for i := range p.Debits {
		d := &p.Debits[i]
		st := &dec.Statuses[i]
		s := levels[slot[i]].State()
		st.Remaining = d.Bucket.Tokens(s, nowMs)
		st.ResetAfter = d.Bucket.TimeToFull(s, nowMs)
		st.Bucket = d.Bucket
		if st.OK {
			continue
		}
		n := need(d)
		if !dec.Admitted {
			// Nothing was consumed, so the plan's other consumes of this
			// bucket are still ahead of the retry.
			n = demands[slot[i]]
		}
		st.RetryAfter = d.Bucket.RetryAfter(s, n, nowMs)
	}
	return dec
}

// demand returns, for each of the n slots, what its bucket must hold for a
// retry of the refused plan p to pass every debit p makes of it: the most
// that any of its debits needs on top of the consumes and charges of that
// bucket that come before it in the plan. One pass over the plan.
func demand(p *Plan, slot []int, n int) []tokenbucket.Millitokens {
	before := make([]tokenbucket.Millitokens, n)
	most := make([]tokenbucket.Millitokens, n)
	for j := range p.Debits {
		d := &p.Debits[j]
		k := slot[j]
		if d.Op == Refund {
			continue
		}
		most[k] = max(most[k], addSat(before[k], need(d)))
		if d.Op == Consume || d.Op == Charge {
			before[k] = addSat(before[k], max(d.Amount, 0))
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

// step applies debit d to *v and reports whether the bucket admitted it.
func step(d *Debit, v *tokenbucket.Level, nowMs int64) bool {
	switch d.Op {
	case Consume:
		return d.Bucket.TryConsume(v, d.Amount, nowMs)
	case Check:
		return d.Bucket.Check(v, nowMs)
	case Charge:
		return d.Bucket.Charge(v, d.Amount, nowMs)
	case Refund:
		d.Bucket.Refund(v, d.Amount, nowMs)
		return true
	}
	return false
}

// need is what a debit's bucket must hold to admit it: a consume's or a
// charge's amount (zero for a non-positive one, as TryConsume), nothing for
// a check (admitted while the bucket is not in debt), and a millitoken for
// an op Decide does not know.
func need(d *Debit) tokenbucket.Millitokens {
	switch d.Op {
	case Consume, Charge:
		return max(d.Amount, 0)
	case Check:
		return 0
	}
	return 1
}
