package dynamotest

import (
	"context"
	"fmt"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// TestFakeScanAndBatchWrite: a Scan pages by Limit (items read, before the
// filter) until LastEvaluatedKey is empty, filters and projects; a
// BatchWriteItem deletes and puts, and refuses more than 25 requests.
func TestFakeScanAndBatchWrite(t *testing.T) {
	ctx := context.Background()
	f := NewFake()
	f.tables["t"] = map[string]map[string]types.AttributeValue{}
	var puts []types.WriteRequest
	for i := range 10 {
		pk := fmt.Sprintf("na/%d", i)
		if i%2 == 1 {
			pk = fmt.Sprintf("nb/%d", i)
		}
		puts = append(puts, types.WriteRequest{PutRequest: &types.PutRequest{Item: map[string]types.AttributeValue{"PK": s(pk), "SK": s("#X"), "v": n("1")}}})
	}
	if _, err := f.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{"t": puts}}); err != nil {
		t.Fatalf("BatchWriteItem(10 puts) = %v", err)
	}
	scan := func() []map[string]types.AttributeValue {
		var got []map[string]types.AttributeValue
		var start map[string]types.AttributeValue
		for pages := 1; ; pages++ {
			res, err := f.Scan(ctx, &dynamodb.ScanInput{
				TableName: aws.String("t"), Limit: aws.Int32(3), ExclusiveStartKey: start,
				FilterExpression: aws.String("begins_with(#p, :p)"), ProjectionExpression: aws.String("#p, SK"),
				ExpressionAttributeNames: map[string]string{"#p": "PK"}, ExpressionAttributeValues: map[string]types.AttributeValue{":p": s("na/")},
			})
			if err != nil {
				t.Fatalf("Scan() page %d = %v", pages, err)
			}
			got = append(got, res.Items...)
			if start = res.LastEvaluatedKey; len(start) == 0 {
				return got
			}
		}
	}
	got := scan()
	if len(got) != 5 || len(got[0]) != 2 || got[0]["v"] != nil {
		t.Fatalf("Scan(na/) = %v, want the 5 items under na/ with PK and SK only", got)
	}
	var dels []types.WriteRequest
	for _, it := range got {
		dels = append(dels, types.WriteRequest{DeleteRequest: &types.DeleteRequest{Key: it}})
	}
	if _, err := f.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{"t": dels}}); err != nil {
		t.Fatalf("BatchWriteItem(5 deletes) = %v", err)
	}
	if got := scan(); len(got) != 0 || len(f.Items("t")) != 5 {
		t.Errorf("after the deletes: Scan(na/) = %v, %d items in all, want none under na/ and the 5 under nb/", got, len(f.Items("t")))
	}
	if _, err := f.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{"t": append(append(append(puts, puts...), puts...), puts...)}}); err == nil {
		t.Errorf("BatchWriteItem(40 requests) = nil, want a validation error")
	}
}
