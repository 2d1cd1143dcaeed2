package dynamo

import (
	"context"
	"errors"

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

// txUpdate is a transaction's update of the bucket item pk by e (its
// update and condition).
func (s *Store) txUpdate(pk string, e *item.Expr) types.TransactWriteItem {
	return types.TransactWriteItem{Update: &types.Update{
		TableName: aws.String(s.cfg.Table), Key: item.Key(pk, item.SKState),
		UpdateExpression: e.Update(), ConditionExpression: e.ConditionExpr(),
		ExpressionAttributeNames: e.AttrNames(), ExpressionAttributeValues: e.AttrValues(),
	}}
}
