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
func (f *Fake) Scan(ctx context.Context, in *dynamodb.ScanInput, _ ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	if err := f.enter(ctx, "Scan"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
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
// most 25 in all (more is a validation error, as DynamoDB answers).
// Nothing is left unprocessed.
func (f *Fake) BatchWriteItem(ctx context.Context, in *dynamodb.BatchWriteItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error) {
	if err := f.enter(ctx, "BatchWriteItem"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, reqs := range in.RequestItems {
		n += len(reqs)
	}
	if n == 0 || n > 25 {
		return nil, &smithy.GenericAPIError{Code: "ValidationException", Message: "Too many items requested for the BatchWriteItem call"}
	}
	var used []types.ConsumedCapacity
	for name, reqs := range in.RequestItems {
		t, err := f.table(aws.String(name))
		if err != nil {
			return nil, err
		}
		for _, r := range reqs {
			switch {
			case r.PutRequest != nil:
				t[keyOf(r.PutRequest.Item)] = clone(r.PutRequest.Item)
			case r.DeleteRequest != nil:
				delete(t, keyOf(r.DeleteRequest.Key))
			}
		}
		used = append(used, types.ConsumedCapacity{TableName: aws.String(name), CapacityUnits: aws.Float64(float64(len(reqs)))})
	}
	return &dynamodb.BatchWriteItemOutput{ConsumedCapacity: used, UnprocessedItems: map[string][]types.WriteRequest{}}, nil
}
