package dynamo

import (
	"context"
	"fmt"
	"time"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo/item"
)

// repaidKeep is how long a bucket item keeps a replica's last repayment
// stamp past the stamp's time: a replica sends a repayment for at most an
// hour after its stamp (cascade.Repayment), and clocks of the fleet may
// differ by some minutes. A write drops older stamps (at most
// maxRepaidDrops of them) on the condition that they are unchanged.
const (
	repaidKeep     = 2 * time.Hour
	maxRepaidDrops = 4
)

// repayTag is what a repayment part carries: the replica that owes and its
// stamp.
type repayTag struct {
	replica string
	stamp   int64
}

// Repay applies r (see cascade.Repayment) to its bucket item, once: as a
// part of the item's lane, written by the item's next conditional
// UpdateItem with the decisions queued on it, on shard 0, on the condition
// that the item's stamp for r.Replica (item.RepaidAttr) is below r.Stamp;
// the write sets it to r.Stamp. An item whose stamp already reaches
// r.Stamp reports Duplicate and changes nothing: an earlier attempt
// landed. Amounts count for the whole bucket, as a decision's do.
//
// Errors: an invalid repayment (wrapping cascade.ErrRepayment, or
// cascade.ErrInvalid for a limit or a value too long); the item too busy
// through the budget (wrapping ErrUnavailable, nothing written); a write
// that went unanswered (wrapping cascade.ErrMayHaveLanded: it may have
// landed, and the same repayment sent again is then a Duplicate); a
// missing table or credentials. The budget is ctx's, at most 4×Timeout.
func (s *Store) Repay(ctx context.Context, r *cascade.Repayment) (cascade.Settled, error) {
	if s.closed.Load() {
		return cascade.Settled{}, errClosed
	}
	if err := r.Validate(); err != nil {
		return cascade.Settled{}, fmt.Errorf("dynamo: repay: %w", err)
	}
	p := &cascade.Plan{Debits: append([]cascade.Debit(nil), r.Debits...)}
	for i := range p.Debits {
		p.Debits[i].Key.Namespace = s.ns(p.Debits[i].Key)
		p.Debits[i].Role = cascade.Advisory // a repayment is never refused
	}
	if err := validPlan(p); err != nil {
		return cascade.Settled{}, fmt.Errorf("dynamo: repay: %w", err)
	}
	pt := &part{kind: repayPart, b: s.bucketOf(r.Key), debits: p.Debits, from: ctx, repay: &repayTag{replica: r.Replica, stamp: r.Stamp}}
	for i := range p.Debits {
		pt.idx = append(pt.idx, i)
	}
	pt.choose(0)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(s.untilDeadline(ctx), 4*s.cfg.Timeout))
	defer cancel()
	s.await(ctx, pt)
	switch {
	case pt.err != nil:
		return cascade.Settled{}, fmt.Errorf("dynamo: repay %s@%d: %w", r.Replica, r.Stamp, pt.itemError())
	case !pt.dec.Admitted:
		// Its item kept too busy through the budget: nothing written.
		return cascade.Settled{}, fmt.Errorf("dynamo: repay %s@%d on %s: bucket item too busy: %w: %w", r.Replica, r.Stamp, pt.pk, errContended, ErrUnavailable)
	case pt.dup:
		return cascade.Settled{Duplicate: true}, nil
	}
	// What it charged was this replica's demand, decided locally: counted
	// as its own, or the fleet's count would grow by it alone and this
	// replica's part read low.
	s.demand.Debited(p, &pt.dec, nil, s.nowMs())
	return cascade.Settled{Statuses: pt.dec.Statuses}, nil
}

// untilDeadline is what is left of ctx's deadline, or forever.
func (s *Store) untilDeadline(ctx context.Context) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		return time.Until(d)
	}
	return 1<<63 - 1
}

// repaid reports whether pt is a repayment that img already applied.
func (pt *part) repaid(img *item.Image) bool {
	return pt.kind == repayPart && img.RepaidStamp(pt.repay.replica) >= pt.repay.stamp
}

// stampRange is the lowest and highest stamp of one replica's repayments
// that a batch writes.
type stampRange struct{ lo, hi int64 }

// addStamp records that j writes pt's repayment.
func (j *judgement) addStamp(pt *part) {
	if j.stamps == nil {
		j.stamps = map[string]stampRange{}
	}
	r, ok := j.stamps[pt.repay.replica]
	if !ok {
		r = stampRange{lo: pt.repay.stamp, hi: pt.repay.stamp}
	}
	r.lo, r.hi = min(r.lo, pt.repay.stamp), max(r.hi, pt.repay.stamp)
	j.stamps[pt.repay.replica] = r
}

// writeStamps adds to e the repayment stamps j writes, each on the
// condition that the item's stamp for the replica is below the lowest of
// them (none of them applied yet), and drops stamps of img older than
// repaidKeep, on the condition that they are unchanged.
func writeStamps(e *item.Expr, img *item.Image, j *judgement, nowMs int64) {
	written := map[string]bool{}
	for replica, r := range j.stamps {
		attr := item.RepaidAttr(replica)
		written[attr] = true
		n := e.Name(attr)
		e.Condition("(attribute_not_exists(" + n + ") OR " + n + " < " + e.Num(r.lo) + ")")
		e.SetAttr(attr, item.NumAV(r.hi))
	}
	if img == nil || !img.Exists {
		return
	}
	stale := nowMs*1000 - repaidKeep.Microseconds()
	dropped := 0
	for attr, stamp := range img.Repaid {
		if written[attr] || stamp >= stale || dropped == maxRepaidDrops {
			continue
		}
		e.Condition(e.Name(attr) + " = " + e.Num(stamp))
		e.RemoveAttr(attr)
		dropped++
	}
}
