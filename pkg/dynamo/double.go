package dynamo

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/pkg/dynamo/item"
)

// A doubling moves a bucket from n shards to 2n without a transaction.
// DynamoDB cancels a transaction when a single write lands on one of its
// items while it prepares, and a hot bucket's shards are written all the
// time: one transaction over every shard, as doublings were, rarely landed
// under the load that asked for it (a simulated fleet of 100 replicas on
// one bucket doubled three times in 60 s). Single conditional writes are
// not cancelled by other writes; they queue behind them. A doubling is
// three rounds of them, each round's items written at once:
//
//  1. create shards n..2n−1 pending: shard_count 2n, holding nothing
//     (item.Image.Pending). A decision that reaches one goes to its pair,
//     the shard n below it (item.Image.Waiting). Shards that exist are
//     kept as they are (another replica's doubling, or this one's earlier
//     try).
//  2. move shards 0..n−1 to shard_count 2n, each on the condition that it
//     says n and is not pending: its level, in whole-bucket units, is kept,
//     and its share halves.
//  3. once every old shard says 2n or more, admit the new shards: no longer
//     pending, empty from that moment, filling by refill.
//
// So at every moment the shares of the shards sum to at most the whole
// bucket: a pending shard holds nothing, a moved one half its old share,
// and a new shard holds only from when every old one was halved. A
// doubling stopped half-way (its replica gone, its budget spent) leaves
// tokens unused, never makes any; a replica whose decision meets one of
// its pending shards later than pendingGrace finishes it (sharder.finish).
// Replicas that double at once double once: the conditions on the old
// count make every write of the second a no-op.

// pendingGrace is how long a pending shard is left to the doubling that
// created it before a replica that meets it finishes that doubling.
const pendingGrace = resizeBudget

// maxFinishDepth bounds how many doublings left half-way below it one
// doubling finishes first (log2 of MaxShards).
const maxFinishDepth = 5

// errShardsMoved ends a doubling that found an old shard below the count it
// doubles from, or merged away: this replica's count is stale, and the
// bucket is measured again.
var errShardsMoved = errors.New("dynamo: the bucket's shard count moved")

// double doubles the shard count of b from n within budget. Losing the race
// to another replica's doubling, or finding the count moved, is no error:
// the next image says the count.
func (s *Store) double(ctx context.Context, b bucket, n int, budget time.Duration) error {
	cctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	err := doubler{s}.run(cctx, b, n, 0)
	if errors.Is(err, errShardsMoved) {
		return nil
	}
	return err
}

// doubler runs the three rounds of a doubling.
type doubler struct{ *Store }

// run doubles b from n; depth counts the doublings below it being finished
// first.
func (d doubler) run(ctx context.Context, b bucket, n, depth int) error {
	if err := d.create(ctx, b, n); err != nil {
		return err
	}
	if err := d.moveOld(ctx, b, n, depth); err != nil {
		return err
	}
	first, err := d.admit(ctx, b, n)
	if err != nil {
		return err
	}
	cacher(d).learnShards(b.base, 2*n)
	if first {
		d.obs.ShardDoubled()
		d.log.WithField("shards", 2*n).Info("doubled the shard count of a hot bucket")
	}
	return nil
}

// create writes shards n..2n−1 of b pending, except those that exist (a
// merge's removed shards come back, pending).
func (d doubler) create(ctx context.Context, b bucket, n int) error {
	at := d.nowMs()
	return eachShard(n, 2*n, func(sh int) error {
		e := item.NewExpr()
		d.setMeta(e, b, 2*n)
		e.SetAttr(item.AttrEmpty, item.NumAV(at))
		e.SetAttr(item.AttrPending, item.NumAV(at))
		e.RemoveAttr(item.AttrMerged)
		e.RemoveAttr(item.AttrTTL)
		e.Condition("attribute_not_exists(" + e.Name(item.AttrPK) + ") OR attribute_exists(" + e.Name(item.AttrMerged) + ")")
		_, _, err := d.write(ctx, b.pk(sh), e) // a failed condition: it exists
		return err
	})
}

// moveOld moves shards 0..n−1 of b to the count 2n. A shard still pending
// from a doubling to n that stopped half-way holds the move up: that
// doubling is finished first, then the shard moved.
func (d doubler) moveOld(ctx context.Context, b bucket, n, depth int) error {
	var mu sync.Mutex
	var held []int
	err := eachShard(0, n, func(sh int) error {
		pending, err := d.moveOne(ctx, b, n, sh)
		if pending {
			mu.Lock()
			held = append(held, sh)
			mu.Unlock()
		}
		return err
	})
	if err != nil || len(held) == 0 {
		return err
	}
	if depth >= maxFinishDepth {
		return errShardsMoved
	}
	if err := d.run(ctx, b, n/2, depth+1); err != nil {
		return err
	}
	for _, sh := range held {
		pending, err := d.moveOne(ctx, b, n, sh)
		switch {
		case err != nil:
			return err
		case pending:
			return errShardsMoved
		}
	}
	return nil
}

// moveOne moves shard sh of b from the count n to 2n (creating it, full,
// if it does not exist), and reports whether a pending mark held it. A
// shard at 2n or more was moved by another replica; any other count is
// errShardsMoved.
func (d doubler) moveOne(ctx context.Context, b bucket, n, sh int) (pending bool, err error) {
	e := item.NewExpr()
	d.setMeta(e, b, 2*n)
	e.Condition("attribute_not_exists(" + e.Name(item.AttrPK) + ") OR (" + e.Name(item.AttrShardCount) + " = " + e.Num(int64(n)) +
		" AND attribute_not_exists(" + e.Name(item.AttrPending) + "))")
	old, ok, err := d.write(ctx, b.pk(sh), e)
	switch {
	case err != nil:
		return false, err
	case ok, old.Exists && !old.Merged && old.ShardCount >= 2*n:
		return false, nil
	case old.Exists && !old.Merged && old.ShardCount == n && old.Pending:
		return true, nil
	default:
		return false, errShardsMoved
	}
}

// admit makes shards n..2n−1 of b count, empty from now (every old shard
// says 2n or more), and reports whether this replica admitted shard n:
// that write lands once a doubling, and the replica that made it counts
// the doubling.
func (d doubler) admit(ctx context.Context, b bucket, n int) (first bool, err error) {
	at := d.nowMs()
	err = eachShard(n, 2*n, func(sh int) error {
		e := item.NewExpr()
		e.SetAttr(item.AttrEmpty, item.NumAV(at))
		e.RemoveAttr(item.AttrPending)
		e.Condition("attribute_exists(" + e.Name(item.AttrPending) + ") AND " + e.Name(item.AttrShardCount) + " = " + e.Num(int64(2*n)))
		_, ok, err := d.write(ctx, b.pk(sh), e) // a failed condition: admitted already
		if err == nil {
			cacher(d).forgetImage(b.pk(sh))
		}
		if ok && sh == n {
			first = true // only this goroutine writes it
		}
		return err
	})
	return first, err
}

// write sends one conditional update of the bucket item pk, again after a
// backoff while DynamoDB throttles the item or a transaction holds it,
// within ctx. A failed condition returns the item's image and ok false.
func (d doubler) write(ctx context.Context, pk string, e *item.Expr) (*item.Image, bool, error) {
	in := &dynamodb.UpdateItemInput{
		TableName: aws.String(d.cfg.Table), Key: item.Key(pk, item.SKState),
		UpdateExpression: e.Update(), ConditionExpression: e.ConditionExpr(),
		ExpressionAttributeNames: e.AttrNames(), ExpressionAttributeValues: e.AttrValues(),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		ReturnConsumedCapacity:              types.ReturnConsumedCapacityTotal,
	}
	for attempt := 0; ; attempt++ {
		img, ok, err := d.update(ctx, in)
		if err == nil || !errors.Is(err, ErrThrottled) && !errors.Is(err, ErrConflict) {
			return img, ok, err
		}
		if !Sleep(ctx, Backoff(attempt)) {
			return nil, false, err
		}
	}
}

// eachShard runs fn for shards lo..hi−1 at once, and returns their errors
// joined.
func eachShard(lo, hi int, fn func(sh int) error) error {
	errs := make([]error, hi-lo)
	var wg sync.WaitGroup
	for sh := lo; sh < hi; sh++ {
		wg.Go(func() { errs[sh-lo] = fn(sh) })
	}
	wg.Wait()
	return errors.Join(errs...)
}
