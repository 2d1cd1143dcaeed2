package degrade

import (
	"time"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// full is the retry-after of a plan refused because MaxItems are tracked.
const full = time.Second

// decideLocked decides plan on the local buckets, all-or-nothing as
// cascade.Decide does, at this replica's share of each limit (shareOf),
// and records
// what it debited as owed to the shared items but those in landed (whose
// write may have landed: counted there once). Caller holds s.mu.
func (s *Store) decideLocked(plan *cascade.Plan, landed map[cascade.Key]bool) cascade.Decision {
	now := s.nowMs()
	n := s.share()
	lp, refuseUntil, ok := s.localPlan(plan, now, n)
	if !ok {
		dec := cascade.Busy(plan.Debits, full)
		dec.Local = true
		return dec
	}
	s.decided++
	var dec cascade.Decision
	if refuseUntil > 0 {
		dec = s.refuseLocked(plan, lp, refuseUntil, now, landed)
	} else {
		levels := make([]tokenbucket.Level, len(lp.lims))
		for j, l := range lp.lims {
			levels[j] = tokenbucket.Stored(l.state)
		}
		dec = cascade.Decide(&lp.plan, lp.slot, levels, now)
		for j, l := range lp.lims {
			l.state = levels[j].State()
		}
		for i := range plan.Debits {
			if applied(&plan.Debits[i], dec.Admitted, dec.Statuses[i].OK) {
				s.owe(lp, i, &plan.Debits[i], landed)
			}
		}
	}
	for i := range dec.Statuses {
		st := &dec.Statuses[i]
		st.Bucket = plan.Debits[i].Bucket
		st.Remaining = lp.lims[lp.slot[i]].part.whole(st.Remaining)
	}
	dec.Local = true
	return dec
}

// local is a plan made for the local buckets: its debits on them, and per
// debit the slot of its limit in lims, whose item is in owners.
type local struct {
	plan   cascade.Plan
	slot   []int
	lims   []*limit
	owners []*item
}

// localPlan tracks plan's items and returns the plan on their local
// buckets, made for a fleet of n, and until when a refusal of the shared
// store stands for it (0: none); false when MaxItems are tracked. Caller
// holds s.mu.
func (s *Store) localPlan(plan *cascade.Plan, now int64, n int) (*local, int64, bool) {
	lp := &local{
		plan: cascade.Plan{Debits: make([]cascade.Debit, len(plan.Debits))},
		slot: make([]int, len(plan.Debits)),
		lims: make([]*limit, 0, len(plan.Debits)),
	}
	refuseUntil := int64(0)
	for i := range plan.Debits {
		d := &plan.Debits[i]
		it := s.track(d.Key, now)
		if it == nil {
			return nil, 0, false
		}
		it.usedMs = now
		if refuses(d) && it.refuseMs > now {
			refuseUntil = max(refuseUntil, it.refuseMs)
		}
		var sn seen
		if s.seer != nil {
			sn.tokens, sn.ok, sn.refused = s.seer.LastSeen(d)
		}
		if refuses(d) && sn.refused {
			refuseUntil = max(refuseUntil, now+refusalWindow.Milliseconds())
		}
		l := limitOf(it, d, s.shareOf(d, n), now, sn, s.startsBare(now))
		j := indexOf(lp.lims, l)
		if j < 0 {
			j = len(lp.lims)
			lp.lims = append(lp.lims, l)
			lp.owners = append(lp.owners, it)
		}
		lp.slot[i] = j
		lp.plan.Debits[i] = *d
		lp.plan.Debits[i].Bucket = l.local
	}
	return lp, refuseUntil, true
}

// refuseLocked refuses plan until refuseUntil: a level the shared store
// refused within the last second stays refused, whatever the others hold.
// Only charges and refunds, applied regardless, are owed. Caller holds
// s.mu.
func (s *Store) refuseLocked(plan *cascade.Plan, lp *local, refuseUntil, now int64, landed map[cascade.Key]bool) cascade.Decision {
	dec := cascade.Busy(plan.Debits, time.Duration(refuseUntil-now)*time.Millisecond)
	for i := range dec.Statuses {
		dec.Statuses[i].Contended = false // refused for the bucket, not busy
	}
	for i := range plan.Debits {
		d := &plan.Debits[i]
		if d.Op != cascade.Charge && d.Op != cascade.Refund {
			continue
		}
		l := lp.lims[lp.slot[i]]
		lv := tokenbucket.Stored(l.state)
		if d.Op == cascade.Charge {
			l.local.ChargeBlind(&lv, d.Amount, now)
		} else {
			l.local.Refund(&lv, d.Amount, now)
		}
		l.state = lv.State()
		s.owe(lp, i, d, landed)
	}
	return dec
}

// refuses reports whether a refusal of d's bucket refuses its plan.
func refuses(d *cascade.Debit) bool {
	return d.Role == cascade.Enforce && (d.Op == cascade.Consume || d.Op == cascade.Check)
}

// applied reports whether a local decision debited d: a consume the plan
// admitted (and its bucket did), a charge or a refund always.
func applied(d *cascade.Debit, admitted, ok bool) bool {
	switch d.Op {
	case cascade.Consume:
		return admitted && ok
	case cascade.Charge, cascade.Refund:
		return true
	}
	return false
}

// owe records the i-th debit of the local decision being made, d, as owed
// to its shared item, unless its write may have landed there, and counts
// the decision once for that item. Caller holds s.mu.
func (s *Store) owe(lp *local, i int, d *cascade.Debit, landed map[cascade.Key]bool) {
	if landed[d.Key] || d.Amount <= 0 {
		return
	}
	l := lp.lims[lp.slot[i]]
	if d.Op == cascade.Refund {
		l.pending -= d.Amount
	} else {
		l.pending += d.Amount
	}
	if it := lp.owners[lp.slot[i]]; it.owedBy != s.decided {
		it.owedBy = s.decided
		it.decisions++
	}
}

// limitOf returns it's local bucket for d's limit, made for share p: a
// new one starts bare (holding only d's amount, the refill being this
// replica's) when bare (startsBare), else from sn, what the shared store
// last showed (its share p of that; full when it showed nothing). One made
// bare is lifted once to that start when bare no longer holds (an outage:
// nobody is given the shared bucket's tokens now), never lowered by it.
// One made for another limit or a share that moved by more than an eighth
// keeps its tokens in proportion.
func limitOf(it *item, d *cascade.Debit, p portion, now int64, sn seen, bare bool) *limit {
	l := it.limits[d.Limit]
	if l == nil {
		l = &limit{bucket: d.Bucket, part: p, local: scale(d.Bucket, p), bare: bare}
		if bare {
			l.state = l.local.Holding(min(max(d.Amount, 0), l.local.Capacity), now)
		} else {
			l.state = l.local.Holding(startOf(l.local, p, sn), now)
		}
		it.limits[d.Limit] = l
		return l
	}
	if l.bare && !bare && l.bucket == d.Bucket {
		l.bare = false
		l.state = l.local.Holding(max(l.local.Tokens(l.state, now), startOf(l.local, l.part, sn)), now)
	}
	if l.bucket != d.Bucket || l.part.moved(p) {
		all := l.part.whole(l.local.Tokens(l.state, now))
		l.bucket, l.part, l.local = d.Bucket, p, scale(d.Bucket, p)
		l.state = l.local.Holding(p.of(all), now)
	}
	return l
}

// startOf is what a local bucket (local, share p of its shared one)
// starts with in an outage: p of what the shared store last showed (sn),
// all of local's capacity when it showed nothing.
func startOf(local tokenbucket.Limit, p portion, sn seen) tokenbucket.Millitokens {
	if sn.ok {
		return p.of(sn.tokens)
	}
	return local.Capacity
}

// seen is what the shared store last showed of a debit's bucket (Seer),
// asked once per debit of a local decision.
type seen struct {
	tokens      tokenbucket.Millitokens
	ok, refused bool
}

// oneToken is the least capacity of a local bucket whose shared one holds
// that much.
const oneToken = tokenbucket.Millitokens(1000)

func indexOf(lims []*limit, l *limit) int {
	for j, x := range lims {
		if x == l {
			return j
		}
	}
	return -1
}
