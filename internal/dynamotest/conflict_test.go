package dynamotest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// setV sets v of pk's item to to, on the condition that it is from.
func setV(pk, from, to string) types.TransactWriteItem {
	return types.TransactWriteItem{Update: &types.Update{
		TableName: aws.String("t"), Key: keyOfPK(pk),
		UpdateExpression:          aws.String("SET v = :to"),
		ConditionExpression:       aws.String("v = :from"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":from": n(from), ":to": n(to)},
	}}
}

// cancelledFor returns the cancellation reasons' codes of err, nil when it
// is no cancelled transaction.
func cancelledFor(err error) []string {
	var tce *types.TransactionCanceledException
	if !errors.As(err, &tce) {
		return nil
	}
	var codes []string
	for _, r := range tce.CancellationReasons {
		codes = append(codes, aws.ToString(r.Code))
	}
	return codes
}

// TestTransactionConflicts: a transaction setting v from 0 to 1 (in flight
// 8 ms: prepare 4, commit 4) and an UpdateItem setting v to 2 (landing 2 ms
// after it is sent) of the same item, the update landing at times across
// the transaction's flight. As DynamoDB documents: an update landing while
// the transaction prepares cancels it (TransactionConflict); one landing
// after it prepared is refused (TransactionConflictException). Never do
// both succeed with the update first.
func TestTransactionConflicts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := fakeTable(t)
		f.SetOptions(Options{Latency: Latency{Write: Dist{P50: 4 * time.Millisecond}}, Conflicts: true})
		ctx := context.Background()
		ms := time.Millisecond
		for i := range 16 {
			lands := time.Duration(i)*ms - 3500*time.Microsecond // after the transaction is sent
			pk := fmt.Sprintf("item-%d", i)
			if _, err := f.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("t"), Item: map[string]types.AttributeValue{"PK": s(pk), "SK": s("b"), "v": n("0")}}); err != nil {
				t.Fatal(err)
			}
			var txErr, upErr error
			var wg sync.WaitGroup
			wg.Go(func() {
				time.Sleep(10 * ms)
				_, txErr = f.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{setV(pk, "0", "1")}})
			})
			wg.Go(func() {
				time.Sleep(10*ms + lands - 2*ms)
				_, upErr = f.UpdateItem(ctx, &dynamodb.UpdateItemInput{
					TableName: aws.String("t"), Key: keyOfPK(pk), UpdateExpression: aws.String("SET v = :two"),
					ExpressionAttributeValues: map[string]types.AttributeValue{":two": n("2")},
				})
			})
			wg.Wait()
			var tcf *types.TransactionConflictException
			codes, refused := fmt.Sprint(cancelledFor(txErr)), errors.As(upErr, &tcf)
			var want string // the transaction's cancellation, the update refused, v
			switch {
			case lands < 0: // the update first: the transaction's condition fails
				want = "[ConditionalCheckFailed] false 2"
			case lands < 4*ms: // while the transaction prepares
				want = "[TransactionConflict] false 2"
			case lands < 8*ms: // after it prepared
				want = "[] true 1"
			default: // after it committed
				want = "[] false 2"
			}
			if got := fmt.Sprintf("%s %t %s", codes, refused, attr(t, f, pk, "v")); got != want {
				t.Errorf("update landing %v into the transaction: transaction %v, update %v, v %s; want %q", lands, txErr, upErr, attr(t, f, pk, "v"), want)
			}
			if txErr == nil && upErr == nil && attr(t, f, pk, "v") != "2" {
				t.Errorf("update landing %v: both succeeded with v %s: the update ran before the transaction's read", lands, attr(t, f, pk, "v"))
			}
		}
	})
}

// TestTransactionConflictsWithTransaction: a transaction sent while
// another is in flight on one of its items is cancelled, TransactionConflict
// for that item; sent after the first commits, it commits.
func TestTransactionConflictsWithTransaction(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := fakeTable(t)
		f.SetOptions(Options{Latency: Latency{Write: Dist{P50: 4 * time.Millisecond}}, Conflicts: true})
		ctx := context.Background()
		add := func(pks ...string) *dynamodb.TransactWriteItemsInput {
			in := &dynamodb.TransactWriteItemsInput{}
			for _, pk := range pks {
				in.TransactItems = append(in.TransactItems, types.TransactWriteItem{Update: &types.Update{
					TableName: aws.String("t"), Key: keyOfPK(pk), UpdateExpression: aws.String("ADD c :one"),
					ExpressionAttributeValues: map[string]types.AttributeValue{":one": n("1")},
				}})
			}
			return in
		}
		var first, second error
		var wg sync.WaitGroup
		wg.Go(func() { _, first = f.TransactWriteItems(ctx, add("a")) })
		wg.Go(func() {
			time.Sleep(5 * time.Millisecond)
			_, second = f.TransactWriteItems(ctx, add("b", "a"))
		})
		wg.Wait()
		if first != nil || fmt.Sprint(cancelledFor(second)) != "[None TransactionConflict]" {
			t.Errorf("transactions at once = %v, %v; want the first, the second cancelled for a", first, second)
		}
		if _, err := f.TransactWriteItems(ctx, add("b", "a")); err != nil {
			t.Errorf("transaction after = %v, want committed", err)
		}
		if a, b := attr(t, f, "a", "c"), attr(t, f, "b", "c"); a != "2" || b != "1" {
			t.Errorf("a's c = %s, b's c = %s, want 2 and 1", a, b)
		}
	})
}

// TestConflictsUnderLoad: 10 writers for 2 s at DynamoDB's latencies (no
// throughput limit),
// each either adding to items a and b in a transaction or adding to a
// alone. Every failure is one of the documented conflicts; a and b carry
// exactly the committed transactions, and a the landed single writes.
func TestConflictsUnderLoad(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := fakeTable(t)
		f.SetOptions(Options{Latency: LikeDynamoDB().Latency, Conflicts: true})
		ctx := context.Background()
		var mu sync.Mutex
		var txOK, upOK, txConflicts, upConflicts int
		var wg sync.WaitGroup
		for w := range 10 {
			r := rand.New(rand.NewPCG(uint64(w), 1))
			wg.Go(func() {
				for end := time.Now().Add(2 * time.Second); time.Now().Before(end); {
					time.Sleep(time.Duration(r.IntN(50)) * time.Millisecond)
					var err error
					tx := r.IntN(2) == 0
					if tx {
						_, err = f.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
							{Update: &types.Update{TableName: aws.String("t"), Key: keyOfPK("a"), UpdateExpression: aws.String("ADD tx :one"), ExpressionAttributeValues: map[string]types.AttributeValue{":one": n("1")}}},
							{Update: &types.Update{TableName: aws.String("t"), Key: keyOfPK("b"), UpdateExpression: aws.String("ADD tx :one"), ExpressionAttributeValues: map[string]types.AttributeValue{":one": n("1")}}},
						}})
					} else {
						_, err = f.UpdateItem(ctx, addOne("a"))
					}
					var tcf *types.TransactionConflictException
					mu.Lock()
					switch {
					case err == nil && tx:
						txOK++
					case err == nil:
						upOK++
					case tx && slices.Contains(cancelledFor(err), "TransactionConflict"):
						txConflicts++
					case !tx && errors.As(err, &tcf):
						upConflicts++
					default:
						t.Errorf("transaction %t: %v, want success or a documented conflict", tx, err)
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		t.Logf("transactions: %d committed, %d cancelled; updates: %d landed, %d refused", txOK, txConflicts, upOK, upConflicts)
		if a, b, c := attr(t, f, "a", "tx"), attr(t, f, "b", "tx"), attr(t, f, "a", "c"); a != strconv.Itoa(txOK) || b != a || c != strconv.Itoa(upOK) {
			t.Errorf("a's tx %s, b's tx %s, a's c %s; want %d, %d, %d", a, b, c, txOK, txOK, upOK)
		}
		if txConflicts == 0 || upConflicts == 0 || txOK == 0 {
			t.Errorf("want transactions committed and conflicts of both kinds under this load")
		}
	})
}
