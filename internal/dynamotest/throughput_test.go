package dynamotest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/pkg/dynamo"
)

// throttled says whether err is DynamoDB's throttling, as the store
// classifies it.
func throttled(err error) bool {
	return errors.Is(dynamo.Classify("test", err), dynamo.ErrThrottled)
}

// TestPartitionWriteThroughput: a partition written at 2,000 units a second
// for 10 s takes 1,000 a second once its burst (a second's worth) is spent,
// the rest throttled with ThrottlingException; another partition, written
// at 500 a second alongside, is never throttled. A transaction on the
// spent partition is cancelled with ThrottlingError for its item.
func TestPartitionWriteThroughput(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := fakeTable(t)
		f.SetOptions(Options{Throughput: LikeDynamoDB().Throughput})
		ctx := context.Background()
		var hot, hotLate, hotThrottled int
		for i := range 20000 { // one every 0.5 ms
			_, err := f.UpdateItem(ctx, addOne("hot"))
			var te *types.ThrottlingException
			switch {
			case err == nil:
				hot++
				if i >= 10000 {
					hotLate++
				}
			case errors.As(err, &te) && throttled(err):
				hotThrottled++
			default:
				t.Fatalf("hot UpdateItem() = %v, want success or ThrottlingException", err)
			}
			if i%4 == 0 {
				if _, err := f.UpdateItem(ctx, addOne("cool")); err != nil {
					t.Fatalf("cool UpdateItem() = %v, want no throttling at 500 a second", err)
				}
			}
			time.Sleep(500 * time.Microsecond)
		}
		t.Logf("hot: %d written (%d in the last 5 s), %d throttled", hot, hotLate, hotThrottled)
		if want := 1000*10 + 1000; hot < want*98/100 || hot > want*102/100 {
			t.Errorf("hot partition wrote %d in 10 s, want %d ± 2%% (1,000 a second and a second's burst)", hot, want)
		}
		if hotLate < 4900 || hotLate > 5100 {
			t.Errorf("hot partition wrote %d in its last 5 s, want 5,000 ± 2%%", hotLate)
		}
		_, err := f.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
			{Update: addOneIn("cool")}, {Update: addOneIn("hot")},
		}})
		if fmt.Sprint(cancelledFor(err)) != "[None ThrottlingError]" || !throttled(err) {
			t.Errorf("transaction on the spent partition = %v, want cancelled, ThrottlingError for hot", err)
		}
	})
}

// addOneIn is addOne as a transaction's Update.
func addOneIn(pk string) *types.Update {
	u := addOne(pk)
	return &types.Update{TableName: u.TableName, Key: u.Key, UpdateExpression: u.UpdateExpression, ExpressionAttributeValues: u.ExpressionAttributeValues}
}

// TestPartitionReadThroughput: a partition read strongly consistently at
// 6,000 a second for 3 s takes 3,000 a second after its burst; another read
// eventually consistently at the same pace (half a unit a read) is never
// throttled. A BatchGetItem of both then leaves the spent partition's key
// unprocessed.
func TestPartitionReadThroughput(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := fakeTable(t)
		f.SetOptions(Options{Throughput: LikeDynamoDB().Throughput})
		ctx := context.Background()
		get := func(pk string, consistent bool) error {
			_, err := f.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("t"), Key: keyOfPK(pk), ConsistentRead: aws.Bool(consistent)})
			return err
		}
		hot := 0
		for range 18000 { // one every 1/6 ms
			switch err := get("hot", true); {
			case err == nil:
				hot++
			case !throttled(err):
				t.Fatalf("hot GetItem() = %v", err)
			}
			if err := get("cool", false); err != nil {
				t.Fatalf("cool GetItem() = %v, want no throttling at 3,000 units a second", err)
			}
			time.Sleep(time.Second / 6000)
		}
		if want := 3000*3 + 3000; hot < want*98/100 || hot > want*102/100 {
			t.Errorf("hot partition read %d in 3 s, want %d ± 2%%", hot, want)
		}
		out, err := f.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{
			"t": {Keys: []map[string]types.AttributeValue{keyOfPK("hot"), keyOfPK("cool")}, ConsistentRead: aws.Bool(true)},
		}})
		if err != nil || len(out.UnprocessedKeys["t"].Keys) != 1 || sval(out.UnprocessedKeys["t"].Keys[0]["PK"]) != "hot" {
			t.Errorf("BatchGetItem() = %+v, %v, want hot's key unprocessed", out, err)
		}
	})
}

// TestOptionsOffByDefault: a new Fake takes any pace on one partition.
func TestOptionsOffByDefault(t *testing.T) {
	f := fakeTable(t)
	for i := range 5000 {
		if _, err := f.UpdateItem(context.Background(), addOne("hot")); err != nil {
			t.Fatalf("UpdateItem() #%d = %v, want no limit by default", i, err)
		}
	}
}
