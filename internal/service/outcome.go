package service

import (
	"time"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// readDecision reads the store's decision into each item: its most
// restrictive limit, with the remaining tokens, retry-after and reset of
// that limit. A limit's status is the one at its debit slot (see plan). A
// deny limit (requests_per_unit: 0) has no debit; it refuses with its period
// as both retry-after and reset, since no wait would ever admit.
func readDecision(items []item, dec *cascade.Decision) {
	for i := range items {
		it := &items[i]
		if !it.applies() {
			continue
		}
		a, r, d := &it.asked, &it.rule, &it.decided
		p := 0 // the limit's place in tier order, and so in d.slots
		for ti := range r.tiers {
			for li := range r.tiers[ti].limits {
				l := &r.tiers[ti].limits[li]
				var (
					refused      bool
					remain       int64
					retry, reset time.Duration
					bucket       tokenbucket.Limit
				)
				k := d.slots[p]
				p++
				if k == noDebit {
					refused = !a.negative
					if refused {
						retry, reset = l.Period(), l.Period()
					}
				} else {
					st := &dec.Statuses[k]
					refused = !st.OK
					if !refused {
						remain = max(int64(st.Remaining/tokenbucket.PerToken), 0)
					}
					retry, reset, bucket = st.RetryAfter, st.ResetAfter, st.Bucket
				}
				d.violated = d.violated || refused
				if d.worst < 0 || (refused && !d.refused) || (refused == d.refused && remain < d.remain) {
					d.worst, d.worstAt, d.refused, d.remain, d.retry, d.reset, d.bucket = li, ti, refused, remain, retry, reset, bucket
				}
			}
		}
	}
}

// unavailable fills each item after a store failure: deny limits refuse, and
// every other limit is refused when the policy blocks.
func unavailable(items []item, blocked bool) {
	for i := range items {
		it := &items[i]
		if !it.applies() {
			continue
		}
		d := &it.decided
		d.worst, d.worstAt = -1, 0
	tiers:
		for ti, t := range it.rule.tiers {
			for li, l := range t.limits {
				if d.worst < 0 {
					d.worst, d.worstAt = li, ti
				}
				if l.Deny && !it.asked.negative {
					d.worst, d.worstAt = li, ti
					d.refused = true
					break tiers
				}
			}
		}
		d.refused = d.refused || (blocked && d.role != cascade.Advisory)
		d.violated = d.refused
	}
}
