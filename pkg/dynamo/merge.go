package dynamo

import (
	"context"
	"errors"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/pkg/dynamo/item"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// merge halves the shard count of b from n (a power of two, at least 2)
// once its load is gone: it reads every shard (strongly consistent), and
// one transaction moves the tokens of shard i+n/2 into shard i, for each i
// below n/2, and leaves shards n/2..n−1 behind as items a merge removed
// (image.gone: shard_count n/2, attrMerged, no levels). Each shard's
// update is conditional on the count n and on every level, and the clocks
// of the last two writers, that the read found, so that a write between
// the read and the transaction refuses it (then nothing changes: the
// bucket is measured again). It does nothing when a shard is missing,
// already merged, holds a level no limit reads, or was written recently by
// any replica (its last two writes closer than twice 1/ShardMergeRate).
func (s sharder) merge(ctx context.Context, b bucket, n int) error {
	imgs, err := s.readCount(ctx, b, n)
	if err != nil || imgs == nil || !s.idleShards(imgs) {
		return err
	}
	now := s.nowMs()
	tx, ok := s.mergeTx(b, imgs, now)
	if !ok {
		return nil
	}
	cctx, cancel := s.tbl.Call(ctx)
	defer cancel()
	_, err = s.api.TransactWriteItems(cctx, &dynamodb.TransactWriteItemsInput{TransactItems: tx, ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal})
	if err != nil {
		cerr := Classify("merge shards "+s.cfg.Table, err)
		if errors.Is(cerr, ErrCondition) || errors.Is(cerr, ErrConflict) {
			return nil // written meanwhile, or resized by another replica
		}
		return cerr
	}
	s.obs.ShardMerged()
	s.log.WithField("shards", n/2).Info("halved the shard count of an idle bucket")
	cacher(s).shrinkShards(b.base, n/2)
	for sh := range n {
		cacher(s).forgetImage(b.pk(sh))
	}
	return nil
}

// readCount reads shards 0..n−1 of b, strongly consistent, and returns
// their images, or nil when they are not all there with the count n.
func (s sharder) readCount(ctx context.Context, b bucket, n int) ([]*item.Image, error) {
	cctx, cancel := s.tbl.Call(ctx)
	defer cancel()
	imgs := make([]*item.Image, n)
	for sh := range n {
		img, err := s.readBucket(cctx, b.pk(sh))
		if err != nil {
			return nil, err
		}
		if !img.Exists || img.Merged || img.Pending || img.ShardCount != n {
			return nil, nil
		}
		imgs[sh] = img
	}
	return imgs, nil
}

// idleShards reports whether no shard of imgs shows a recent load: each
// shard's last write came at least 2/ShardMergeRate seconds after the one
// before, or that long ago (after the merge, a shard takes the writes of
// two). A shard whose two clocks are equal shows no rate (its first write
// records its own clock twice) and does not stop a merge.
func (s sharder) idleShards(imgs []*item.Image) bool {
	if s.cfg.ShardMergeRate <= 0 {
		return false
	}
	gap := int64(2000 / s.cfg.ShardMergeRate)
	now := s.nowMs()
	for _, img := range imgs {
		if img.WroteMs != img.PrevMs && img.WroteMs-img.PrevMs < gap && now-img.WroteMs < gap {
			return false
		}
	}
	return true
}

// mergeTx builds the merge of imgs (shards 0..n−1 of b): one update per
// shard. It returns false when some shard holds a level that no limit
// reads.
func (s sharder) mergeTx(b bucket, imgs []*item.Image, now int64) ([]types.TransactWriteItem, bool) {
	n, half := len(imgs), len(imgs)/2
	tx := make([]types.TransactWriteItem, 0, n)
	for i := range half {
		e := s.unchanged(imgs[i], n)
		if !mergeInto(e, imgs[i], imgs[i+half], n, now) {
			return nil, false
		}
		tx = append(tx, s.txUpdate(b.pk(i), e))
	}
	for i := half; i < n; i++ {
		e := s.unchanged(imgs[i], n)
		e.SetAttr(item.AttrShardCount, item.NumAV(int64(half)))
		e.SetAttr(item.AttrMerged, item.BoolAV(true))
		e.SetAttr(item.AttrTTL, item.NumAV(now/1000+int64(minBucketTTL.Seconds())+1))
		for p := range imgs[i].Limits {
			e.RemoveAttr(p + "_" + item.FieldLevel)
			e.RemoveAttr(p + "_" + item.FieldConsumed) // usage is counted by its changes: nothing to count here
			e.RemoveAttr(p + "_" + item.FieldShape)
		}
		item.StampWriter(e, now)
		tx = append(tx, s.txUpdate(b.pk(i), e))
	}
	return tx, true
}

// unchanged conditions a merge's update of a shard on what its image img
// says: the shard count n, not merged, every level and the clocks of its
// last two writers (every bucket write sets them).
func (s sharder) unchanged(img *item.Image, n int) *item.Expr {
	e := item.NewExpr()
	e.Condition(e.Name(item.AttrShardCount) + " = " + e.Num(int64(n)))
	e.Condition("attribute_not_exists(" + e.Name(item.AttrMerged) + ")")
	for p, l := range img.Limits {
		e.Condition(e.Name(p+"_"+item.FieldLevel) + " = " + e.Value(item.BigAV(l.Level)))
	}
	for attr, v := range map[string]int64{item.AttrWriter: img.WroteMs, item.AttrPrevWriter: img.PrevMs} {
		if v == 0 {
			e.Condition("attribute_not_exists(" + e.Name(attr) + ")")
		} else {
			e.Condition(e.Name(attr) + " = " + e.Num(v))
		}
	}
	return e
}

// mergeInto adds to e the update of shard keep (of n) that takes over the
// tokens of shard gone: for every limit either holds, the shard's share
// of what each holds (tokenbucket.Tokens, whole millitokens, rounded
// toward −∞) is added, and the level set to hold the sum as a shard of
// n/2 (tokenbucket.Holding): shares of the merged shard are exactly the
// two shares before. A limit neither holds reads as a new bucket, full,
// unless either shard was created empty by a doubling: then the merged
// shard is marked so, and such a limit starts empty (it could forfeit
// tokens, never create them). It returns false when a level has no limit
// to read it with.
func mergeInto(e *item.Expr, keep, gone *item.Image, n int, now int64) bool {
	half := n / 2
	e.SetAttr(item.AttrShardCount, item.NumAV(int64(half)))
	fullAt := now/1000 + int64(minBucketTTL.Seconds())
	for p, l := range pairLimits(keep, gone) {
		if l.Validate() != nil {
			return false
		}
		kl, _ := startLevel(keep, p, l, now)
		gl, _ := startLevel(gone, p, l, now)
		t := shardShare(l.Tokens(kl.State(), now), n) + shardShare(l.Tokens(gl.State(), now), n)
		st := l.Holding(t*tokenbucket.Millitokens(half), now)
		e.SetAttr(p+"_"+item.FieldLevel, item.BigAV(st.X))
		setShape(e, p, l)
		fullAt = max(fullAt, ceilSecond(l.FullAt(st)))
	}
	if gone.Empty && !keep.Empty {
		e.SetAttr(item.AttrEmpty, item.NumAV(emptySince(gone, now)))
	}
	e.SetAttr(item.AttrTTL, item.NumAV(fullAt+1))
	item.StampWriter(e, now)
	return true
}

// pairLimits returns the limits of the levels keep and gone hold, by
// attribute prefix, each with the limit to read both with: keep's, else
// gone's (startLevel restates a level written under another limit). A
// level that neither holds with a valid limit is returned with the zero
// Limit.
func pairLimits(keep, gone *item.Image) map[string]tokenbucket.Limit {
	out := map[string]tokenbucket.Limit{}
	for _, img := range []*item.Image{gone, keep} {
		for p, li := range img.Limits {
			if li.Shape.Validate() == nil {
				out[p] = li.Shape
			} else if _, ok := out[p]; !ok {
				out[p] = tokenbucket.Limit{}
			}
		}
	}
	return out
}

// shardShare is a shard's share of what a level of a bucket of n shards
// holds, in whole millitokens rounded toward −∞: a shard holds 1/n of its
// level.
func shardShare(t tokenbucket.Millitokens, n int) tokenbucket.Millitokens {
	q := t / tokenbucket.Millitokens(n)
	if t%tokenbucket.Millitokens(n) != 0 && t < 0 {
		q--
	}
	return q
}

// sharder doubles and merges the shards of buckets as their write rates ask (merge.go, resize.go).
type sharder struct{ *Store }
