package dynamo

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo/item"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// runBatch decides a batch of parts on one bucket item (one shard) with one
// conditional write: cascade.Decide on each part in arrival order, each
// seeing the ones before, over the levels of the last image this replica
// saw, and a write whose condition is the range of stored levels for which
// those decisions hold. When the condition fails, the old image that
// DynamoDB returns decides the batch again, exactly. The batch has a budget
// of Config.Timeout of its own, so that a cold read or a write outlives the
// callers that gave up and fills the cache for the next batch.
// A hot batch (hot: its bucket is hot, pace.go) refuses no part on one
// shard only to try another, claims what it writes, and reads its shard
// again rather than decide on an image several paces old.
func (s batchWriter) runBatch(pk string, batch []*part, hot bool) {
	ctx, cancel := context.WithTimeout(s.life, s.cfg.Timeout)
	defer cancel()
	decisions := decisionsOf(batch)
	ctx = s.callContext(ctx, decisions)
	deadline, _ := ctx.Deadline()
	b := batch[0].b
	img := cacher(s).cachedImage(pk)
	read := false // img came from DynamoDB during this batch
	// busy is why an earlier write of this batch did not land, when it is
	// contention: ContendedRaced (a race lost to another writer) or
	// ContendedThrottled (DynamoDB throttled the item; not contention
	// under Config.ThrottleFails).
	busy := ""
	homeOnly(batch, hot)
	for attempt := 0; ; attempt++ {
		cur := batch          // the parts this attempt writes (claim sets the others aside)
		var stale *item.Image // an image of a hot shard too old to claim on
		if hot && img != nil && !read && s.nowMs()-img.AtMs > staleClaims*pacer(s).pace().Milliseconds() {
			stale, img = img, nil
		}
		if img == nil {
			if img = s.readShard(ctx, b, pk, batch, decisions, stale); img == nil {
				return
			}
			read = true
		}
		if img.Gone(batch[0].shard) {
			if !read { // cached: a doubling may have brought it back since
				img = nil
				continue
			}
			s.bounce(batch)
			return
		}
		if pair, ok := img.Waiting(batch[0].shard); ok {
			if !read { // cached: its doubling may have admitted it since
				img = nil
				continue
			}
			s.toPair(b, batch, img, pair)
			return
		}
		now := s.nowMs()
		if hot && img.ShardCount > 1 {
			cur, _ = s.claim(pk, batch, img, read, now)
			if len(cur) == 0 {
				return // every part decided without a write
			}
		}
		j := judge(cur, img, now)
		if !j.changed {
			// Nothing to write. A check stands only on an image DynamoDB
			// returned during this batch. So does a refusal, unless the
			// rejection cache is on: then, as for the cache, an image of
			// at most maxRejection ago will do (levels only rise between
			// refunds).
			if !read && (j.admitted || s.cfg.RejectionCacheSize <= 0 || now-img.AtMs > maxRejection.Milliseconds()) {
				img = nil
				continue
			}
			s.deliver(cur, j, now)
			return
		}
		left := time.Until(deadline)
		newImg, ok, err := s.update(ctx, s.writeInput(pk, b, img, j, now))
		switch {
		case err == nil && ok:
			s.landed(pk, b, cur, img, newImg, j, now, hot)
			return
		case err == nil:
			if s.lostRace(pk, b, cur, img, newImg, j, now, hot) {
				return
			}
			img, read = newImg, true // the condition failed: decide on what is there
			busy = ContendedRaced
		case errors.Is(err, ErrConflict):
			// A transaction (a settlement, a doubling) held the item:
			// DynamoDB wrote nothing. A race lost: read the item again and
			// decide on it, after a backoff.
			img = nil
			busy = ContendedRaced
			if !Sleep(ctx, Backoff(attempt)) {
				s.contend(cur, nil, ContendedRaced)
				return
			}
		case errors.Is(err, ErrThrottled):
			// The item is past what one partition writes: retry within the
			// budget, with twice the shards when this replica is not
			// doubling the bucket already (throttledWrite).
			if !s.cfg.ThrottleFails {
				busy = ContendedThrottled
			}
			if img.Exists && sharder(s).throttledWrite(ctx, b, img.ShardCount, now) {
				img = nil
			}
			if !Sleep(ctx, Backoff(attempt)) {
				if s.cfg.ThrottleFails {
					s.fail(cur, errThrottledItem)
				} else {
					s.contend(cur, img, ContendedThrottled)
				}
				return
			}
		default:
			// The write may have landed: DynamoDB applies a write whose
			// answer never came back. Nothing of this batch is written
			// again (see unknown).
			cacher(s).forgetImage(pk)
			if busy != "" && ctx.Err() != nil && left < s.cfg.Timeout/2 {
				// Most of the budget went on races lost to other replicas
				// or on DynamoDB throttling the item, and the last call ran
				// out of what was left: contention. A call that had half
				// the budget and did not answer is DynamoDB not answering.
				s.unknown(cur, img, err, busy)
				return
			}
			s.unknown(cur, img, err, "")
			return
		}
		if ctx.Err() != nil {
			s.contend(cur, img, ContendedRaced) // lost races until the budget ran out: contention, not an outage
			return
		}
	}
}

// readShard reads the shard pk of b for batch, learning from stale (its image
// too old to claim on, or nil) whether other replicas wrote it since
// (sawOthers); when the read fails it ends the batch and returns nil.
func (s batchWriter) readShard(ctx context.Context, b bucket, pk string, batch []*part, decisions []context.Context, stale *item.Image) *item.Image {
	img, err := s.fresh(ctx, b, pk, decisions)
	switch {
	case err == nil:
		s.sawOthers(b, stale, img)
		return img
	case errors.Is(err, ErrThrottled) && s.cfg.ThrottleFails:
		s.fail(batch, errThrottledItem)
	case errors.Is(err, errContended) || errors.Is(err, ErrThrottled):
		s.contend(batch, nil, contendReason(err))
	default:
		s.fail(batch, err)
	}
	return nil
}

// landed ends a batch whose write (of j, decided on img at now) landed:
// newImg is the item after it.
func (s batchWriter) landed(pk string, b bucket, batch []*part, img, newImg *item.Image, j *judgement, now int64, hot bool) {
	cacher(s).keepImage(b, pk, newImg)
	s.obs.Batched(len(batch), depthOf(batch))
	sharder(s).wrote(b, newImg.ShardCount, now)
	pre := preImage(newImg, img, j)
	if hot {
		s.tookOthers(b, pk, img, pre, j)
	}
	if exact := judge(batch, pre, now); exact.sameOutcome(j) {
		j = exact // the statuses of the levels the write found
	}
	s.deliver(batch, j, now)
}

// lostRace learns from a write of batch (j, decided on img at now) whose
// condition failed, newImg the item as DynamoDB returned it, and reports
// whether that ends the batch: on a shard of a hot sharded bucket other
// replicas write too, when newImg no longer holds the batch, they took
// it. Another write now would race them again for what is left, each race
// a write billed; the batch is contended and what is left is the next
// batch's. A one-shard bucket writes again, as before sharding: its
// refusals are the bucket's, and a second look is cheap there.
func (s batchWriter) lostRace(pk string, b bucket, batch []*part, img, newImg *item.Image, j *judgement, now int64, hot bool) bool {
	if hot {
		s.tookOthers(b, pk, img, newImg, j)
		if newImg.Exists {
			sharder(s).racedWrite(b, newImg.ShardCount, now)
		}
	}
	cacher(s).keepImage(b, pk, newImg)
	if hot && newImg.Exists && newImg.ShardCount > 1 && cacher(s).crowded(b.base) && short(batch, newImg, s.nowMs()) {
		s.contend(batch, newImg, ContendedRaced)
		return true
	}
	return false
}

// short reports whether batch is only decisions (no charge, refund or
// repayment, which are always written) and img, at now, refuses one.
func short(batch []*part, img *item.Image, now int64) bool {
	for _, pt := range batch {
		if pt.kind != decisionPart || pt.hasCost() {
			return false
		}
	}
	j := judge(batch, img, now)
	for _, d := range j.decs {
		if !d.Admitted {
			return true
		}
	}
	return false
}

// homeOnly keeps the parts of a hot batch on their home shard: a refusal
// there stands (pace.go).
func homeOnly(batch []*part, hot bool) {
	for _, pt := range batch {
		if !hot {
			return
		}
		pt.tried = max(pt.tried, 2)
	}
}

// depthOf is the least cascade.Debit.Depth among the debits of batch.
func depthOf(batch []*part) int {
	d := math.MaxInt
	for _, pt := range batch {
		for i := range pt.debits {
			d = min(d, int(pt.debits[i].Depth))
		}
	}
	if d == math.MaxInt {
		return 0
	}
	return d
}

// fresh reads pk's image through a flight: one read per item however many
// batches want it, which fills the cache even when this batch's budget ends
// first (the batch is then contended). The read serves the batch's
// decisions.
func (s batchWriter) fresh(ctx context.Context, b bucket, pk string, decisions []context.Context) (*item.Image, error) {
	var img *item.Image
	fs := reader(s).fly([]string{"\x01" + pk}, decisions, func(ctx context.Context, _ []string, f *flight) error {
		for attempt := 0; ; attempt++ {
			im, err := s.readBucket(ctx, pk)
			if err == nil {
				cacher(s).keepImage(b, pk, im)
				img = im
				return nil
			}
			if !errors.Is(err, ErrThrottled) {
				return err
			}
			f.throttled.Store(true)
			if !Sleep(ctx, Backoff(attempt)) {
				return err
			}
		}
	})
	if err := reader(s).wait(ctx, fs[0]); err != nil {
		return nil, err
	}
	if img == nil { // another batch's flight read it
		img = cacher(s).cachedImage(pk)
	}
	if img == nil {
		return nil, errContended
	}
	return img, nil
}

// contendReason names why a read ended a batch for contention.
func contendReason(err error) string {
	if errors.Is(err, ErrThrottled) {
		return ContendedThrottled
	}
	return ContendedRead
}

// Backoff is the jittered wait before retry attempt attempt: between half
// and all of 1 ms doubled per attempt, at most 64 ms.
func Backoff(attempt int) time.Duration {
	d := time.Millisecond << min(attempt, 6)
	return d/2 + rand.N(d/2+1)
}

// Sleep waits d, and reports false when ctx ends first.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// fail ends a batch with err: DynamoDB did not answer. An item this schema
// cannot read is refused instead (see ContendedUnreadable), and logged; a
// give-back on it fails with err (moot).
func (s batchWriter) fail(batch []*part, err error) {
	if errors.Is(err, item.ErrSchema) {
		s.log.WithError(err).Warn("refusing decisions on a bucket item this schema cannot read")
		s.contend(batch, nil, ContendedUnreadable)
		for _, pt := range batch {
			if pt.givesBack() {
				pt.err = err // a give-back: there is nothing it could give back to
			}
		}
		return
	}
	for _, pt := range batch {
		pt.err = err
	}
}

// bounce ends a batch on a shard that a merge removed: nothing was
// written, and every part goes to a shard that counts (see await).
func (s batchWriter) bounce(batch []*part) {
	for _, pt := range batch {
		pt.err = errShardGone
	}
}

// toPair ends a batch on a shard that a doubling created and that holds
// nothing yet (item.Image.Waiting): nothing was written, and every part
// goes to pair (see await). A doubling that left the shard so for longer
// than pendingGrace is finished.
func (s batchWriter) toPair(b bucket, batch []*part, img *item.Image, pair int) {
	if s.nowMs()-img.PendingMs > pendingGrace.Milliseconds() {
		sharder(s).finish(b, img.ShardCount/2)
	}
	for _, pt := range batch {
		pt.err = &shardPending{pair: pair}
	}
}

// contend ends a batch that its own item kept too busy. Parts that only
// ask are refused (contended); parts that charge or refund report cost
// already spent, so they are handed back to be queued again (see await).
func (s batchWriter) contend(batch []*part, img *item.Image, reason string) {
	now := s.nowMs()
	for _, pt := range batch {
		if pt.hasCost() {
			pt.err = errContended
			continue
		}
		pt.dec = contended(pt, img, now)
		s.obs.Contended(reason)
	}
}

// decisionsOf returns the contexts of the decisions a batch serves, in
// arrival order.
func decisionsOf(batch []*part) []context.Context {
	out := make([]context.Context, 0, len(batch))
	for _, pt := range batch {
		if pt.from != nil {
			out = append(out, pt.from)
		}
	}
	return out
}

// unknown ends a batch whose write went unanswered, so may or may not have
// landed. A part that charges or refunds fails with errOutcomeUnknown and
// is never queued or given back again: writing it a second time could apply
// it twice. The other parts are contended for reason when it is set (the
// budget went on lost races), else they fail with err (DynamoDB did not
// answer).
func (s batchWriter) unknown(batch []*part, img *item.Image, err error, reason string) {
	now := s.nowMs()
	for _, pt := range batch {
		switch {
		case pt.hasCost():
			pt.err = fmt.Errorf("%w: %w", errOutcomeUnknown, err)
		case reason != "":
			pt.dec = contended(pt, img, now)
			s.obs.Contended(reason)
		default:
			pt.err = fmt.Errorf("%w: %w", cascade.ErrMayHaveLanded, err)
		}
	}
}

// errThrottledItem fails a batch whose item DynamoDB kept throttling
// through its budget, under Config.ThrottleFails: nothing was written.
var errThrottledItem = fmt.Errorf("dynamo: item throttled through the decision's budget: %w: %w", ErrThrottled, ErrUnavailable)

// deliver hands each part its decision and remembers the refusals.
func (s batchWriter) deliver(batch []*part, j *judgement, now int64) {
	for i, pt := range batch {
		pt.dec, pt.n, pt.start, pt.dup = j.decs[i], j.n, &j.starts[i], j.dups[i]
		if !pt.dec.Admitted && !pt.hasCost() {
			cacher(s).rememberRefusal(pt, now)
		}
	}
}

// judgement is a batch decided on one image.
type judgement struct {
	n        int // shard count
	prefixes []string
	limits   []tokenbucket.Limit // the shape of each limit, as the batch's last debit of it says
	levels   []tokenbucket.Level
	absent   []bool  // the item does not hold the limit yet
	used     []int64 // millitokens debited, for the consumption counter
	decs     []cascade.Decision
	starts   []partStart           // what each part was decided on
	changed  bool                  // some level changes, or a repayment stamp: the batch writes
	admitted bool                  // some part was admitted
	dups     []bool                // per part: a repayment the item applied already
	stamps   map[string]stampRange // per replica, the repayment stamps the batch writes
}

// partStart is what a part was decided on: its plan as decided (amounts in
// whole-bucket units), the slots of its debits and its levels before the
// decision.
type partStart struct {
	plan   *cascade.Plan
	slot   []int
	levels []tokenbucket.Level
	now    int64
}

// judge decides every part of batch, in order, on img at now.
func judge(batch []*part, img *item.Image, now int64) *judgement {
	j := &judgement{n: 1}
	if img.Exists {
		j.n = img.ShardCount
	}
	index := map[string]int{}
	for _, pt := range batch {
		q := pt.plan(j.n)
		dup := pt.repaid(img)
		switch {
		case dup:
			for i := range q.Debits {
				q.Debits[i].Amount = 0 // applied before: nothing changes
			}
		case pt.kind == repayPart:
			j.addStamp(pt)
		}
		j.dups = append(j.dups, dup)
		slot := make([]int, len(q.Debits))
		var mine []int // batch indexes of the part's limits, in first-use order
		for i := range q.Debits {
			d := &q.Debits[i]
			pre := item.LimitPrefix(d.Limit)
			k, ok := index[pre]
			if !ok {
				k = len(j.prefixes)
				index[pre] = k
				lv, absent := startLevel(img, pre, d.Bucket, now)
				j.prefixes = append(j.prefixes, pre)
				j.limits = append(j.limits, d.Bucket)
				j.levels = append(j.levels, lv)
				j.absent = append(j.absent, absent)
				j.used = append(j.used, 0)
			}
			j.limits[k] = d.Bucket
			local := -1
			for m, kk := range mine {
				if kk == k {
					local = m
				}
			}
			if local < 0 {
				local = len(mine)
				mine = append(mine, k)
			}
			slot[i] = local
		}
		lv := make([]tokenbucket.Level, len(mine))
		for m, k := range mine {
			lv[m] = j.levels[k]
		}
		j.starts = append(j.starts, partStart{plan: q, slot: slot, levels: append([]tokenbucket.Level(nil), lv...), now: now})
		dec := cascade.Decide(q, slot, lv, now)
		for m, k := range mine {
			j.levels[k] = lv[m]
		}
		if !dup {
			j.count(pt, mine, slot, &dec)
		}
		j.decs = append(j.decs, dec)
		j.admitted = j.admitted || dec.Admitted
	}
	j.changed = len(j.stamps) > 0
	for k := range j.levels {
		j.changed = j.changed || j.levels[k].Changed()
	}
	return j
}

// count adds what part pt used, as decided by dec, to the consumption
// counters of its limits (mine: the batch index of each of the part's
// limits; slot: each debit's). A compensation's amounts are scaled to the
// shard count it gives back on: it counts what it gives back once, in
// whole-bucket units as every other part does.
func (j *judgement) count(pt *part, mine, slot []int, dec *cascade.Decision) {
	scale := int64(max(pt.scale, 1))
	for i, d := range pt.debits {
		k := mine[slot[i]]
		switch {
		case d.Op == cascade.Charge:
			j.used[k] += int64(d.Amount) / scale
		case d.Op == cascade.Refund:
			j.used[k] -= int64(d.Amount) / scale
		case d.Op == cascade.Consume && dec.Admitted && dec.Statuses[i].OK:
			j.used[k] += int64(d.Amount) / scale
		}
	}
}

// startLevel is the level a batch starts from: the stored one, or, for a
// limit the item does not hold, a new bucket (full, or on a shard a
// doubling created empty when it was created, refilled since: its share
// was handed out already, and a shard no decision has written yet must
// not start empty again at every one, or it never fills).
func startLevel(img *item.Image, prefix string, l tokenbucket.Limit, now int64) (tokenbucket.Level, bool) {
	if li, ok := img.Has(prefix); ok {
		if li.Shape.Validate() == nil && li.Shape != l {
			// Written under another limit: keep its tokens (a SET on the
			// condition that nobody wrote it since).
			return tokenbucket.Replaced(stateOf(li), l.Restate(stateOf(li), li.Shape, now)), false
		}
		return tokenbucket.Stored(stateOf(li)), false
	}
	if img != nil && img.Exists && img.Empty {
		return tokenbucket.New(l.Empty(emptySince(img, now))), true
	}
	return tokenbucket.New(l.Full(now)), true
}

// emptySince is when a shard a doubling created started empty: the
// doubling's clock, now when the item does not say (written by an older
// version) or says a time after now (another replica's clock ahead).
func emptySince(img *item.Image, now int64) int64 {
	if img.EmptyMs > 0 && img.EmptyMs < now {
		return img.EmptyMs
	}
	return now
}

func stateOf(l item.LimitImage) tokenbucket.State { return tokenbucket.State{X: l.Level} }

func (j *judgement) sameOutcome(o *judgement) bool {
	if len(j.decs) != len(o.decs) {
		return false
	}
	for i := range j.decs {
		if j.decs[i].Admitted != o.decs[i].Admitted {
			return false
		}
		for k := range j.decs[i].Statuses {
			if j.decs[i].Statuses[k].OK != o.decs[i].Statuses[k].OK {
				return false
			}
		}
	}
	return true
}

// preImage is the item as the write found it: each level the write added
// to held its new value less the delta; a level it set held something in
// the condition's range, for which the decisions are the same, so the guess
// stands.
func preImage(newImg, guessed *item.Image, j *judgement) *item.Image {
	pre := &item.Image{Exists: guessed.Exists, Empty: guessed.Empty, EmptyMs: guessed.EmptyMs, ShardCount: j.n, Limits: map[string]item.LimitImage{}, Repaid: guessed.Repaid}
	for p, l := range guessed.Limits {
		pre.Limits[p] = l
	}
	for k, p := range j.prefixes {
		if j.absent[k] {
			continue
		}
		lv := &j.levels[k]
		nl, ok := newImg.Has(p)
		if !ok {
			continue
		}
		if set, delta := lv.Write(); !set && lv.Changed() {
			nl.Level = nl.Level.Sub(delta)
			pre.Limits[p] = nl
		} else if !lv.Changed() {
			pre.Limits[p] = nl
		}
	}
	return pre
}

// writeInput builds the batch's conditional write.
func (s batchWriter) writeInput(pk string, b bucket, img *item.Image, j *judgement, now int64) *dynamodb.UpdateItemInput {
	e := s.writeExpr(b, img, j, now)
	return &dynamodb.UpdateItemInput{
		TableName:                           aws.String(s.cfg.Table),
		Key:                                 item.Key(pk, item.SKState),
		UpdateExpression:                    e.Update(),
		ConditionExpression:                 e.ConditionExpr(),
		ExpressionAttributeNames:            e.AttrNames(),
		ExpressionAttributeValues:           e.AttrValues(),
		ReturnValues:                        types.ReturnValueAllNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		ReturnConsumedCapacity:              types.ReturnConsumedCapacityTotal,
	}
}

// writeExpr builds the update and condition of a write of judgement j,
// decided on img: every level j changes, added to (or set) on the
// condition that the stored level lies in the range for which j's
// decisions hold, the shard count j assumed, and the item's expiry. A
// batch writes it alone (writeInput); a settlement in a transaction
// (settle.go).
func (s batchWriter) writeExpr(b bucket, img *item.Image, j *judgement, now int64) *item.Expr {
	e := item.NewExpr()
	if img.Exists {
		e.Condition(e.Name(item.AttrShardCount) + " = " + e.Num(int64(j.n)))
	} else {
		e.Condition("attribute_not_exists(" + e.Name(item.AttrPK) + ")")
		s.setMeta(e, b, 1)
	}
	fullAt := now/1000 + int64(minBucketTTL.Seconds())
	touched := map[string]bool{}
	for k, p := range j.prefixes {
		lv := &j.levels[k]
		x := p + "_" + item.FieldLevel
		if j.absent[k] {
			// Decided on a new, full bucket: only while the item holds
			// no level for this limit (another replica may have written
			// one since this image).
			if img.Exists {
				e.Condition("attribute_not_exists(" + e.Name(x) + ")")
			}
			if !lv.Changed() {
				continue
			}
			e.SetAttr(x, item.BigAV(lv.State().X))
			e.SetAttr(p+"_"+item.FieldConsumed, item.NumAV(j.used[k]))
			setShape(e, p, j.limits[k])
		} else {
			if img.Limits[p].Shape != j.limits[k] {
				setShape(e, p, j.limits[k])
			}
			condRange(e, x, lv)
			if lv.Changed() {
				if set, v := lv.Write(); set {
					e.SetAttr(x, item.BigAV(v))
				} else {
					e.AddBig(x, v)
				}
			}
			if j.used[k] != 0 {
				e.AddNum(p+"_"+item.FieldConsumed, j.used[k])
			}
		}
		if lv.Changed() {
			fullAt = max(fullAt, ceilSecond(j.limits[k].FullAt(tokenbucket.State{X: upper(lv)})))
			touched[p] = true
		}
	}
	for p, l := range img.LimitsOrNil() {
		if !touched[p] && l.Shape.Validate() == nil {
			fullAt = max(fullAt, ceilSecond(l.Shape.FullAt(stateOf(l))))
		}
	}
	e.SetAttr(item.AttrTTL, item.NumAV(fullAt+1))
	item.StampWriter(e, now)
	writeStamps(e, img, j, now)
	return e
}

func setShape(e *item.Expr, prefix string, l tokenbucket.Limit) {
	e.SetAttr(prefix+"_"+item.FieldShape, item.ShapeAV(l))
}

func ceilSecond(ms int64) int64 {
	if ms > math.MaxInt64-999 {
		return math.MaxInt64 / 1000
	}
	return (ms + 999) / 1000
}

// upper is the highest level the write can leave: what decides how long the
// item must live.
func upper(lv *tokenbucket.Level) tokenbucket.Int128 {
	set, v := lv.Write()
	if set {
		return v
	}
	_, hi := lv.Bounds()
	if hi != tokenbucket.MaxInt128 {
		return lv.Apply(hi)
	}
	return lv.State().X
}

// condRange conditions the write on the stored level lying in lv's bounds.
func condRange(e *item.Expr, attr string, lv *tokenbucket.Level) {
	lo, hi := lv.Bounds()
	n := e.Name(attr)
	switch {
	case lo != tokenbucket.MinInt128 && hi != tokenbucket.MaxInt128:
		e.Condition(n + " BETWEEN " + e.Value(item.BigAV(lo)) + " AND " + e.Value(item.BigAV(hi)))
	case lo != tokenbucket.MinInt128:
		e.Condition(n + " >= " + e.Value(item.BigAV(lo)))
	case hi != tokenbucket.MaxInt128:
		e.Condition(n + " <= " + e.Value(item.BigAV(hi)))
	default:
		e.Condition("attribute_exists(" + n + ")")
	}
}

// batchWriter writes the batches of an item's lane: one conditional write of every decision queued on it (batch.go).
type batchWriter struct{ *Store }
