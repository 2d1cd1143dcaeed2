package dynamotest

import (
	"context"
	"sort"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
)

// Scan implements API: every item of the table in key order (PK, then
// SK), from ExclusiveStartKey, at most Limit of them read per page (as
// DynamoDB, Limit counts items read, before the filter), filtered by
// FilterExpression and projected on the top-level attributes
// ProjectionExpression names. LastEvaluatedKey is set when items remain.
// It takes a read's latency and no read units.
func (f *Fake) Scan(ctx context.Context, in *dynamodb.ScanInput, _ ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	if err := f.enter(ctx, "Scan"); err != nil {
		return nil, err
	}
	var out *dynamodb.ScanOutput
	err := f.call(ctx, readCall, func() error {
		var err error
		out, err = f.scanLocked(in)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (f *Fake) scanLocked(in *dynamodb.ScanInput) (*dynamodb.ScanOutput, error) {
	t, err := f.table(in.TableName)
	if err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(t))
	for k := range t {
		if in.ExclusiveStartKey == nil || k > keyOf(in.ExclusiveStartKey) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	out := &dynamodb.ScanOutput{}
	for i, k := range keys {
		if in.Limit != nil && int32(i) == *in.Limit {
			last := t[keys[i-1]]
			out.LastEvaluatedKey = map[string]types.AttributeValue{"PK": last["PK"], "SK": last["SK"]}
			break
		}
		item := t[k]
		out.ScannedCount++
		ok, err := evalCond(in.FilterExpression, item, in.ExpressionAttributeNames, in.ExpressionAttributeValues)
		if err != nil {
			return nil, err
		}
		if ok {
			out.Items = append(out.Items, project(item, in.ProjectionExpression, in.ExpressionAttributeNames))
		}
	}
	out.Count = int32(len(out.Items))
	return out, nil
}

// project returns a copy of item with only the top-level attributes expr
// names ("#a, b"), or all of them when expr is nil.
func project(item map[string]types.AttributeValue, expr *string, names map[string]string) map[string]types.AttributeValue {
	if expr == nil {
		return clone(item)
	}
	out := map[string]types.AttributeValue{}
	for _, n := range strings.Split(*expr, ",") {
		n = strings.TrimSpace(n)
		if real, ok := names[n]; ok {
			n = real
		}
		if v, ok := item[n]; ok {
			out[n] = v
		}
	}
	return out
}

// BatchWriteItem implements API: the puts and deletes of every table, at
// most 25 in all (more is a validation error, as DynamoDB answers). Under
// Options.Throughput a write whose partition is out of write units is left
// in UnprocessedItems, and a call that wrote none is throttled; otherwise
// nothing is left unprocessed. It does not conflict with transactions.
func (f *Fake) BatchWriteItem(ctx context.Context, in *dynamodb.BatchWriteItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error) {
	if err := f.enter(ctx, "BatchWriteItem"); err != nil {
		return nil, err
	}
	var out *dynamodb.BatchWriteItemOutput
	err := f.call(ctx, writeCall, func() error {
		var err error
		out, err = f.batchWriteLocked(in)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (f *Fake) batchWriteLocked(in *dynamodb.BatchWriteItemInput) (*dynamodb.BatchWriteItemOutput, error) {
	n := 0
	for _, reqs := range in.RequestItems {
		n += len(reqs)
	}
	if n == 0 || n > 25 {
		return nil, &smithy.GenericAPIError{Code: "ValidationException", Message: "Too many items requested for the BatchWriteItem call"}
	}
	var used []types.ConsumedCapacity
	left := map[string][]types.WriteRequest{}
	var throttled error
	wrote := 0
	for name, reqs := range in.RequestItems {
		t, err := f.table(aws.String(name))
		if err != nil {
			return nil, err
		}
		done := 0
		for _, r := range reqs {
			var key, item map[string]types.AttributeValue
			switch {
			case r.PutRequest != nil:
				key, item = r.PutRequest.Item, r.PutRequest.Item
			case r.DeleteRequest != nil:
				key = r.DeleteRequest.Key
			default:
				continue
			}
			if err := f.takeOne(writeCall, aws.String(name), key, writeUnits(t[keyOf(key)], item)); err != nil {
				throttled = err
				left[name] = append(left[name], r)
				continue
			}
			if item != nil {
				t[keyOf(key)] = clone(item)
			} else {
				delete(t, keyOf(key))
			}
			done++
		}
		wrote += done
		used = append(used, types.ConsumedCapacity{TableName: aws.String(name), CapacityUnits: aws.Float64(float64(done))})
	}
	if wrote == 0 && throttled != nil {
		return nil, throttled
	}
	return &dynamodb.BatchWriteItemOutput{ConsumedCapacity: used, UnprocessedItems: left}, nil
}
