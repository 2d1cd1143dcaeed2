package dynamo

import (
	"context"
	"errors"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/dynalimit/dynalimit/pkg/dynamo/item"
)

// update sends one conditional update. On a failed condition it returns the
// item's old image (ALL_OLD) and ok false.
func (s *Store) update(ctx context.Context, in *dynamodb.UpdateItemInput) (img *item.Image, ok bool, err error) {
	cctx, cancel := s.call(ctx)
	defer cancel()
	out, err := s.api.UpdateItem(cctx, in)
	if err != nil {
		var ccf *types.ConditionalCheckFailedException
		if errors.As(err, &ccf) {
			img, err := s.decode(ccf.Item)
			return img, false, err
		}
		return nil, false, Classify("update "+aws.ToString(in.TableName), err)
	}
	img, err = s.decode(out.Attributes)
	return img, err == nil, err
}

// readBucket reads one bucket item, strongly consistent, within ctx.
func (s *Store) readBucket(ctx context.Context, pk string) (*item.Image, error) {
	out, err := s.api.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(s.cfg.Table), Key: item.Key(pk, item.SKState),
		ConsistentRead: aws.Bool(true), ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal,
	})
	if err != nil {
		return nil, Classify("get "+s.cfg.Table, err)
	}
	return s.decode(out.Item)
}

// decode decodes an item DynamoDB returned and stamps it with the time it
// arrived, which it compares with the clock of its last writer (sawWriter).
func (s *Store) decode(it map[string]types.AttributeValue) (*item.Image, error) {
	img, err := item.Decode(it)
	if err != nil {
		return nil, err
	}
	img.AtMs = s.nowMs()
	s.sawWriter(it, img.AtMs)
	return img, nil
}

// setMeta writes the descriptive attributes of a new bucket item: the raw
// namespace, entity and resource (stored once; the key holds them escaped
// or hashed) and the shard count. An entity's place in a hierarchy lives
// in its entity record only.
func (s *Store) setMeta(e *item.Expr, b bucket, n int) {
	e.SetAttr(item.AttrNamespace, item.StrAV(b.ns))
	e.SetAttr(item.AttrEntity, item.StrAV(b.key.Entity))
	e.SetAttr(item.AttrResource, item.StrAV(b.key.Resource))
	e.SetAttr(item.AttrShardCount, item.NumAV(int64(n)))
}

// double doubles the shard count of b from n: one transaction sets
// shard_count to 2n on shards 0..n−1 (creating those never written) and
// creates shards n..2n−1 empty at this moment (or brings back, empty,
// those a merge removed). Levels are kept in whole-bucket units, so every
// old shard's share halves by itself; the new shards fill by refill from
// the moment they were created (item.AttrEmpty holds it). The call has
// budget. Losing the race to another replica's doubling (or merge) is
// success: the conditions on the old count make it happen once.
func (s *Store) double(ctx context.Context, b bucket, n int, budget time.Duration) error {
	tx := make([]types.TransactWriteItem, 2*n)
	created := s.nowMs()
	for sh := 0; sh < 2*n; sh++ {
		e := item.NewExpr()
		s.setMeta(e, b, 2*n)
		if sh < n {
			e.Condition("attribute_not_exists(" + e.Name(item.AttrPK) + ") OR " + e.Name(item.AttrShardCount) + " = " + e.Num(int64(n)))
		} else {
			e.Condition("attribute_not_exists(" + e.Name(item.AttrPK) + ") OR attribute_exists(" + e.Name(item.AttrMerged) + ")")
			e.SetAttr(item.AttrEmpty, item.NumAV(created))
			e.RemoveAttr(item.AttrMerged)
			e.RemoveAttr(item.AttrTTL)
		}
		tx[sh] = s.txUpdate(b.pk(sh), e)
	}
	cctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	_, err := s.api.TransactWriteItems(cctx, &dynamodb.TransactWriteItemsInput{TransactItems: tx, ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal})
	if err != nil {
		cerr := Classify("double shards "+s.cfg.Table, err)
		if errors.Is(cerr, ErrCondition) || errors.Is(cerr, ErrConflict) {
			return nil // another replica doubled first; the next image says so
		}
		return cerr
	}
	s.obs.ShardDoubled()
	s.log.WithField("shards", 2*n).Info("doubled the shard count of a hot bucket")
	cacher{s}.learnShards(b.base, 2*n)
	return nil
}

// txUpdate is a transaction's update of the bucket item pk by e (its
// update and condition).
func (s *Store) txUpdate(pk string, e *item.Expr) types.TransactWriteItem {
	return types.TransactWriteItem{Update: &types.Update{
		TableName: aws.String(s.cfg.Table), Key: item.Key(pk, item.SKState),
		UpdateExpression: e.Update(), ConditionExpression: e.ConditionExpr(),
		ExpressionAttributeNames: e.AttrNames(), ExpressionAttributeValues: e.AttrValues(),
	}}
}
