package dynamo

import (
	"time"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo/item"
)

// gateWindow is how long after an item's last refusal (its retry-after) a
// plan over several items decides that item first.
const gateWindow = time.Second

// gated splits the parts of a plan over several items: first, the parts
// whose items refused within the last gateWindow (past the refusal's
// retry-after, since until then the rejection cache answers), each of
// them enforcing consumes and checks only; rest, the others. A plan whose
// first parts refuse again is refused without writing the rest, which
// would only have to be given back: a tenant that refuses the keys under
// it costs one write per batch of its own, and none on its keys. A plan
// they admit costs one more round trip. When every part (or none) is
// gated, all go together.
func (s *Store) gated(parts []*part) (first, rest []*part) {
	if s.cfg.RejectionCacheSize <= 0 {
		return nil, parts
	}
	now := s.nowMs()
	s.mu.Lock()
	for _, pt := range parts {
		r, ok := s.rejects.peek(pt.b.base)
		if ok && now < r.untilMs+gateWindow.Milliseconds() && enforcesOnly(pt) {
			first = append(first, pt)
		} else {
			rest = append(rest, pt)
		}
	}
	s.mu.Unlock()
	if len(rest) == 0 {
		return nil, parts
	}
	return first, rest
}

// enforcesOnly reports whether every debit of pt is an enforced consume or
// check: a refusal of it refuses the plan whatever the other parts say.
func enforcesOnly(pt *part) bool {
	for _, d := range pt.debits {
		if d.Role != cascade.Enforce || (d.Op != cascade.Consume && d.Op != cascade.Check) {
			return false
		}
	}
	return true
}

// stopped reports whether the plan is settled by parts alone: one of them
// failed, or refused an enforced debit.
func stopped(parts []*part) bool {
	for _, pt := range parts {
		if pt.err != nil {
			return true
		}
		for i, st := range pt.dec.Statuses {
			if !st.OK && pt.debits[i].Role == cascade.Enforce {
				return true
			}
		}
	}
	return false
}

// notSent fills the decisions of parts that were not sent, because the plan
// was refused before them: each debit OK (nothing was asked of its item),
// with what this replica's last image of the item says it holds. They are
// not admitted, so nothing is given back for them.
func (s *Store) notSent(parts []*part) {
	now := s.nowMs()
	for _, pt := range parts {
		img := cacher{s}.cachedImage(pt.b.pk(pt.shard))
		pt.dec = cascade.Decision{Statuses: make([]cascade.Status, len(pt.debits))}
		for i, d := range pt.debits {
			lv, _ := startLevel(img, item.LimitPrefix(d.Limit), d.Bucket, now)
			st := lv.State()
			pt.dec.Statuses[i] = cascade.Status{
				OK:         true,
				Remaining:  d.Bucket.Tokens(st, now),
				ResetAfter: d.Bucket.TimeToFull(st, now),
				Bucket:     d.Bucket,
			}
		}
	}
}
