package admin

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/item"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// resetAttempts bounds how often ResetBucket reads and writes again after
// the bucket's shard count changed under it.
const resetAttempts = 3

// ResetBucket refills every limit of key's bucket to its capacity on every
// shard: every limit its items store (the capacity of the limit its level
// was written with) and every other limit in limits. It reads every shard,
// then writes them and an audit record under key's entity (action
// "bucket.reset", with the principal, see dynamo.WithPrincipal) in one
// TransactWriteItems: every shard's update is conditional on the item
// existing with the shard count read, so a reset lands whole on the shards
// as they are, or not at all (a doubling meanwhile: it reads again, up to 3
// times). The usage counters (consumed) are kept. It returns the bucket as
// it was before, and false with no write when the bucket has no item (a
// bucket without one is full). Replicas that cached a refusal of it
// answer from that cache until the refusal's retry-after, at most a second.
// Cost: 2 write units per shard and 2 for the audit record, and a read
// unit per shard.
func (s *Store) ResetBucket(ctx context.Context, key cascade.Key, limits map[string]tokenbucket.Limit) (BucketState, bool, error) {
	return s.rewrite(ctx, key, limits, func(b bucketRef, imgs []*item.Image, before BucketState) error {
		return s.writeReset(ctx, b, imgs, limits, before)
	})
}

// rewrite reads key's bucket and calls write with it, again (up to
// resetAttempts reads) while write's condition on the shard count fails,
// then has the decision store forget its images of the shards
// (dynamo.Store.ForgetBucket). It returns the bucket as it was, and false
// with no write when the bucket has no item.
func (s *Store) rewrite(ctx context.Context, key cascade.Key, limits map[string]tokenbucket.Limit, write func(bucketRef, []*item.Image, BucketState) error) (BucketState, bool, error) {
	if err := s.st.CheckOpen(); err != nil {
		return BucketState{}, false, err
	}
	for attempt := 1; ; attempt++ {
		b, imgs, err := s.readShards(ctx, key)
		if err != nil {
			return BucketState{}, false, err
		}
		before := s.bucketState(key, imgs, limits)
		if !before.Exists() {
			return before, false, nil
		}
		err = write(b, imgs, before)
		if errors.Is(err, dynamo.ErrCondition) && attempt < resetAttempts {
			continue
		}
		if err != nil {
			return BucketState{}, false, err
		}
		for sh := range imgs {
			s.st.ForgetBucket(b.pk(sh))
		}
		return before, true, nil
	}
}

// writeReset writes the full levels of every existing shard of b and the
// audit record in one transaction.
func (s *Store) writeReset(ctx context.Context, b bucketRef, imgs []*item.Image, limits map[string]tokenbucket.Limit, before BucketState) error {
	now := s.t.Now().UnixMilli()
	n := len(imgs)
	var tx []types.TransactWriteItem
	for sh, img := range imgs {
		if !img.Exists {
			continue
		}
		e := item.NewExpr()
		for prefix, l := range shardLimits(img, limits) {
			e.SetAttr(prefix+"_"+item.FieldLevel, item.BigAV(l.Limit.Full(now).X))
			e.SetAttr(prefix+"_"+item.FieldShape, item.ShapeAV(l.Limit))
		}
		e.SetAttr(item.AttrTTL, item.NumAV(now/1000+int64(dynamo.MinBucketTTL.Seconds())))
		e.RemoveAttr(item.AttrEmpty)
		e.Condition("attribute_exists(" + e.Name(item.AttrPK) + ") AND " + e.Name(item.AttrShardCount) + " = " + e.Num(int64(n)))
		tx = append(tx, s.txUpdate(b.pk(sh), e))
	}
	sc := Scope{Namespace: b.ns, Entity: b.key.Entity, Resource: b.key.Resource}
	tx = append(tx, types.TransactWriteItem{Put: s.auditPut(b.ns, sc, "bucket.reset", bucketString(before), fmt.Sprintf("shards=%d full", n))})
	return s.transact(ctx, "reset bucket", tx)
}

// txUpdate is a transaction's update of the bucket item pk by e (its
// update and condition).
func (s *Store) txUpdate(pk string, e *item.Expr) types.TransactWriteItem {
	return types.TransactWriteItem{Update: &types.Update{
		TableName: aws.String(s.t.Name), Key: item.Key(pk, item.SKState),
		UpdateExpression: e.Update(), ConditionExpression: e.ConditionExpr(),
		ExpressionAttributeNames: e.AttrNames(), ExpressionAttributeValues: e.AttrValues(),
	}}
}

// transact writes tx in one TransactWriteItems, within the table's budget
// of a call; an error is classified as op's.
func (s *Store) transact(ctx context.Context, op string, tx []types.TransactWriteItem) error {
	cctx, cancel := s.t.Call(ctx)
	defer cancel()
	_, err := s.t.API.TransactWriteItems(cctx, &dynamodb.TransactWriteItemsInput{TransactItems: tx})
	return dynamo.Classify(op, err)
}

// bucketString is an audit record's account of a bucket: each limit's
// tokens left of its capacity, on all shards.
func bucketString(b BucketState) string {
	tot := b.Total()
	names := make([]string, 0, len(tot))
	for n := range tot {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, 0, len(names))
	for _, n := range names {
		l := tot[n]
		parts = append(parts, fmt.Sprintf("%s=%s/%s", n, formatTokens(l.Tokens), formatTokens(l.Limit.Capacity)))
	}
	return fmt.Sprintf("shards=%d %s", b.ShardCount, strings.Join(parts, " "))
}

// formatTokens writes millitokens as tokens, with the thousandths when
// there are any.
func formatTokens(m tokenbucket.Millitokens) string {
	if m%tokenbucket.PerToken == 0 {
		return fmt.Sprint(int64(m / tokenbucket.PerToken))
	}
	return fmt.Sprintf("%.3f", float64(m)/float64(tokenbucket.PerToken))
}
