package dynamo

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo/item"
)

// markerMargin is how long past its settlement's Expires a marker lives
// (its ttl): a lease checked on one replica just before it expired may be
// settled on another, whose clock is ahead, just after.
const markerMargin = time.Hour

// maxSettleItems bounds the bucket items of one settlement: a transaction
// holds at most 100 items, the marker being one.
const maxSettleItems = 99

// settlement is one Settle call: its plan (advisory charges and refunds,
// namespaces resolved), split by bucket item and shard, and its marker.
type settlement struct {
	id    string
	from  context.Context // the caller's, for its values (WithCallContext)
	plan  *cascade.Plan
	parts []*part // by bucket item and the shard its debits name
	pk    string  // the marker's
	nonce string  // this call's, on the marker it writes
	ttl   int64   // the marker's expiry, unix seconds
}

// target is a part of a settlement on the item it is written to: the
// shard its debits name, or shard 0 when that item does not exist.
type target struct {
	pt  *part
	img *item.Image
	j   *judgement
}

// Settle applies a settlement (see cascade.Settlement) at most once per ID
// until st.Expires: one TransactWriteItems puts a marker item for the ID
// (n{ns}/LEASE#{id}, #SETTLED, ns the first debit's namespace), on the
// condition that none exists, and updates each bucket item the debits name
// (on the shard each names) as a lane's write would, with its condition.
// The items are read first (strongly consistent; a cached image of at
// most a second serves). A bucket condition that failed is decided again
// on the item DynamoDB returns; a transaction that conflicted, was
// throttled or went unanswered is tried again after a backoff, within a
// budget of max(4×Config.Timeout, 1 s) that the caller's cancellation does
// not end. A marker already there reports Duplicate, unless this call
// wrote it (an earlier attempt that went unanswered but landed): then the
// settlement is reported applied, with statuses from the items read again.
// Errors: an invalid settlement (wrapping cascade.ErrSettlement, a limit,
// a value too long or more than 99 bucket items included); a budget that
// ran out, a missing table or credentials (wrapping ErrUnavailable). After
// an error the settlement may have landed: a later Settle of the ID then
// reports Duplicate.
func (s *Store) Settle(ctx context.Context, st *cascade.Settlement) (cascade.Settled, error) {
	if s.closed.Load() {
		return cascade.Settled{}, errClosed
	}
	stl, err := settler{s}.newSettlement(ctx, st)
	if err != nil {
		return cascade.Settled{}, err
	}
	ctx, cancel := s.budget(ctx, stl.plan)
	defer cancel()
	return settler{s}.settle(ctx, stl)
}

// newSettlement checks st and splits it by bucket item and shard.
func (s settler) newSettlement(ctx context.Context, st *cascade.Settlement) (*settlement, error) {
	if st == nil {
		return nil, fmt.Errorf("dynamo: settle: nil settlement: %w", cascade.ErrSettlement)
	}
	if err := st.Validate(); err != nil {
		return nil, fmt.Errorf("dynamo: settle: %w", err)
	}
	p := &cascade.Plan{Debits: append([]cascade.Debit(nil), st.Debits...)}
	for i := range p.Debits {
		p.Debits[i].Key.Namespace = s.ns(p.Debits[i].Key)
		p.Debits[i].Role = cascade.Advisory // a settlement is never refused
	}
	if err := validPlan(p); err != nil {
		return nil, fmt.Errorf("dynamo: settle %q: %w: %w", st.ID, cascade.ErrSettlement, err)
	}
	ns := s.cfg.Namespace
	if len(p.Debits) > 0 {
		ns = p.Debits[0].Key.Namespace
	}
	stl := &settlement{
		id: st.ID, from: ctx, plan: p, pk: item.LeasePK(ns, st.ID), nonce: rand.Text(),
		ttl: st.Expires.Add(markerMargin).Unix(),
	}
	stl.parts = s.settleParts(p, func(i int) int { return p.Debits[i].Shard })
	if len(stl.parts) > maxSettleItems {
		return nil, fmt.Errorf("dynamo: settle %q: %d bucket items, at most %d: %w", st.ID, len(stl.parts), maxSettleItems, cascade.ErrSettlement)
	}
	return stl, nil
}

// settleParts splits p by bucket item and the shard shardOf gives each
// debit (by its index), in plan order.
func (s settler) settleParts(p *cascade.Plan, shardOf func(i int) int) []*part {
	var parts []*part
	buckets := s.bucketsOf(p)
	for i := range p.Debits {
		d := &p.Debits[i]
		sh := shardOf(i)
		var pt *part
		for _, q := range parts {
			if q.b.key == d.Key && q.shard == sh {
				pt = q
			}
		}
		if pt == nil {
			b := buckets[0]
			for _, bb := range buckets {
				if bb.key == d.Key {
					b = bb
				}
			}
			pt = &part{b: b}
			pt.shard, pt.pk = sh, b.pk(sh)
			parts = append(parts, pt)
		}
		pt.debits = append(pt.debits, *d)
		pt.idx = append(pt.idx, i)
	}
	return parts
}

// settle writes stl, trying again within ctx (see Settle).
func (s settler) settle(ctx context.Context, stl *settlement) (cascade.Settled, error) {
	imgs := map[string]*item.Image{} // images DynamoDB returned during this call
	var last error
	for attempt := 0; ; attempt++ {
		res, done, err := s.settleAttempt(ctx, stl, imgs)
		switch {
		case done:
			return res, err
		case err != nil && !Retryable(err):
			return cascade.Settled{}, fmt.Errorf("dynamo: settle %q: %w", stl.id, err)
		case err != nil:
			last = err
		}
		// A bucket condition that failed is decided again at once, on what
		// DynamoDB returned; anything else after a backoff.
		if ctx.Err() != nil || err != nil && !Sleep(ctx, Backoff(attempt)) {
			if last == nil {
				last = errors.New("bucket conditions kept failing")
			}
			return cascade.Settled{}, fmt.Errorf("dynamo: settle %q: budget ran out: %w (last: %w)", stl.id, ErrUnavailable, last)
		}
	}
}

// errRefusedCall: DynamoDB refused a settlement's call as a client error
// that trying again cannot cure (a validation error, access denied).
var errRefusedCall = fmt.Errorf("dynamo: call refused: %w", ErrUnavailable)

// Retryable reports whether a settlement attempt that failed with err (a
// classified error) is tried again: a read that waited on others, a
// conflict, throttling, no answer; not a missing table or credentials, an
// item this schema cannot read, or a call DynamoDB refused.
func Retryable(err error) bool {
	switch {
	case errors.Is(err, errContended), errors.Is(err, ErrConflict), errors.Is(err, ErrThrottled):
		return true
	case errors.Is(err, ErrNoTable), errors.Is(err, ErrNoCredentials), errors.Is(err, errRefusedCall):
		return false
	}
	return errors.Is(err, ErrUnavailable)
}

// settleAttempt reads and decides stl's items and sends one transaction.
// It reports done with the outcome, or not done with the error to try
// again on (nil when a bucket condition failed: imgs then holds what the
// items hold).
func (s settler) settleAttempt(ctx context.Context, stl *settlement, imgs map[string]*item.Image) (cascade.Settled, bool, error) {
	targets, err := s.settleTargets(ctx, stl, imgs)
	if err != nil {
		return cascade.Settled{}, false, err
	}
	now := s.nowMs()
	tx := []types.TransactWriteItem{s.marker(stl)}
	var written []*target
	for i := range targets {
		tg := &targets[i]
		tg.j = judge([]*part{tg.pt}, tg.img, now)
		if !tg.j.changed {
			continue // nothing to write (amounts of zero): the statuses stand
		}
		u := s.txUpdate(tg.pt.pk, batchWriter(s).writeExpr(tg.pt.b, tg.img, tg.j, now))
		u.Update.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailureAllOld
		tx = append(tx, u)
		written = append(written, tg)
		cacher(s).forgetImage(tg.pt.pk) // whatever the outcome, the lane reads it again
	}
	cctx, cancel := s.call(s.callContext(ctx, []context.Context{stl.from}))
	_, err = s.api.TransactWriteItems(cctx, &dynamodb.TransactWriteItemsInput{TransactItems: tx, ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal})
	cancel()
	if err == nil {
		return cascade.Settled{Statuses: settledStatuses(stl, targets)}, true, nil
	}
	var tce *types.TransactionCanceledException
	if !errors.As(err, &tce) || len(tce.CancellationReasons) != len(tx) {
		return cascade.Settled{}, false, classifySettle(err)
	}
	reasons := tce.CancellationReasons
	if aws.ToString(reasons[0].Code) == "ConditionalCheckFailed" {
		if item.GetS(reasons[0].Item, item.AttrNonce) != stl.nonce {
			return cascade.Settled{Duplicate: true}, true, nil
		}
		// An earlier attempt of this call landed, unanswered.
		res, err := s.landed(ctx, stl)
		return res, true, err
	}
	lost := false
	for i, r := range reasons[1:] {
		if aws.ToString(r.Code) != "ConditionalCheckFailed" {
			continue
		}
		img, err := s.decode(r.Item)
		if err != nil {
			return cascade.Settled{}, true, fmt.Errorf("dynamo: settle %q: %w", stl.id, err)
		}
		imgs[written[i].pt.pk] = img
		cacher(s).keepImage(written[i].pt.b, written[i].pt.pk, img)
		lost = true
	}
	if lost {
		return cascade.Settled{}, false, nil
	}
	return cascade.Settled{}, false, classifySettle(err)
}

// classifySettle classifies a settlement's failed transaction: a client
// error that is neither a conflict nor throttling (nor a cancellation for
// those) wraps errRefusedCall.
func classifySettle(err error) error {
	cerr := Classify("settle", err)
	if errors.Is(cerr, ErrThrottled) || errors.Is(cerr, ErrNoCredentials) || errors.Is(cerr, ErrNoTable) {
		return cerr
	}
	var tce *types.TransactionCanceledException
	if errors.As(err, &tce) {
		for _, r := range tce.CancellationReasons {
			switch aws.ToString(r.Code) {
			case "None", "ConditionalCheckFailed", "TransactionConflict":
			default:
				return fmt.Errorf("dynamo: settle: cancelled (%s): %w: %w", aws.ToString(r.Code), errRefusedCall, err)
			}
		}
		return cerr
	}
	var api smithy.APIError
	if !errors.Is(cerr, ErrConflict) && errors.As(err, &api) && api.ErrorFault() == smithy.FaultClient {
		return fmt.Errorf("dynamo: settle: %w: %w", errRefusedCall, err)
	}
	return cerr
}

// marker is the Put of stl's marker item, on the condition that there is
// none, returning the one there when there is.
func (s settler) marker(stl *settlement) types.TransactWriteItem {
	e := item.NewExpr()
	e.Condition("attribute_not_exists(" + e.Name(item.AttrPK) + ")")
	it := item.Key(stl.pk, item.SKSettled)
	it[item.AttrTTL] = item.NumAV(stl.ttl)
	it[item.AttrNonce] = item.StrAV(stl.nonce)
	return types.TransactWriteItem{Put: &types.Put{
		TableName: aws.String(s.cfg.Table), Item: it,
		ConditionExpression: e.ConditionExpr(), ExpressionAttributeNames: e.AttrNames(),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}}
}

// settleTargets finds the item each part of stl is written to and its
// image: one DynamoDB returned during this call (imgs), a cached one of at
// most maxRejection, or a strongly consistent read. A part on a shard
// whose item does not exist goes to shard 0 (the item's shards expired
// since, or it never had that many), merged with a part there; so does a
// part on a shard a merge removed (image.gone).
func (s settler) settleTargets(ctx context.Context, stl *settlement, imgs map[string]*item.Image) ([]target, error) {
	shardOf := make([]int, len(stl.plan.Debits))
	for _, pt := range stl.parts {
		img, err := s.settleImage(ctx, stl, pt.b, pt.pk, imgs)
		if err != nil {
			return nil, err
		}
		sh := pt.shard
		if _, waiting := img.Waiting(sh); (!img.Exists && sh > 0) || img.Gone(sh) || waiting {
			sh = 0
		}
		for _, i := range pt.idx {
			shardOf[i] = sh
		}
	}
	parts := s.settleParts(stl.plan, func(i int) int { return shardOf[i] })
	targets := make([]target, len(parts))
	for i, pt := range parts {
		img, err := s.settleImage(ctx, stl, pt.b, pt.pk, imgs)
		if err != nil {
			return nil, err
		}
		targets[i] = target{pt: pt, img: img}
	}
	return targets, nil
}

// settleImage returns the image of pk a settlement decides on (see
// settleTargets) and keeps it in imgs.
func (s settler) settleImage(ctx context.Context, stl *settlement, b bucket, pk string, imgs map[string]*item.Image) (*item.Image, error) {
	if img, ok := imgs[pk]; ok {
		return img, nil
	}
	img := cacher(s).cachedImage(pk)
	if img == nil || !img.Exists || s.nowMs()-img.AtMs > maxRejection.Milliseconds() {
		var err error
		if img, err = batchWriter(s).fresh(ctx, b, pk, []context.Context{stl.from}); err != nil {
			return nil, err
		}
	}
	imgs[pk] = img
	return img, nil
}

// settledStatuses are the statuses of stl's debits as targets decided
// them, each with the shard it was written to.
func settledStatuses(stl *settlement, targets []target) []cascade.Status {
	out := make([]cascade.Status, len(stl.plan.Debits))
	for _, tg := range targets {
		for k, i := range tg.pt.idx {
			out[i] = tg.j.decs[0].Statuses[k]
			out[i].Shard = tg.pt.shard
		}
	}
	return out
}

// landed reports stl applied by an earlier attempt of this call: statuses
// of what the items hold now, read again (decided as debits of nothing,
// so that nothing is applied twice).
func (s settler) landed(ctx context.Context, stl *settlement) (cascade.Settled, error) {
	for _, pt := range stl.parts {
		cacher(s).forgetImage(pt.pk)
	}
	targets, err := s.settleTargets(ctx, stl, map[string]*item.Image{})
	if err != nil {
		return cascade.Settled{}, fmt.Errorf("dynamo: settle %q: applied, then reading it: %w", stl.id, err)
	}
	now := s.nowMs()
	for i := range targets {
		tg := &targets[i]
		zero := *tg.pt
		zero.debits = append([]cascade.Debit(nil), tg.pt.debits...)
		for k := range zero.debits {
			zero.debits[k].Amount = 0
		}
		tg.j = judge([]*part{&zero}, tg.img, now)
	}
	return cascade.Settled{Statuses: settledStatuses(stl, targets)}, nil
}

// settler settles leases: one transaction over a settlement's bucket items (settle.go).
type settler struct{ *Store }
