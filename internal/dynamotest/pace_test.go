package dynamotest_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/internal/testutil"
	"github.com/dynalimit/dynalimit/pkg/dynamo/admin"
)

// BenchmarkTablesDropped measures why the shared DynamoDB Local starts
// afresh (recycleAfter): on one process of its own, twelve tables of the
// production schema in turn (streams on), each written 1,000 times by 8
// writers over 800 items and then dropped, or (same) one table written
// twelve times over. It reports DynamoDB Local's CPU a write at the 4th
// and at the 12th round: with a new table each round it grows, on one
// table it does not.
//
//	go test -run '^$' -bench TablesDropped -benchtime 1x ./internal/dynamotest
func BenchmarkTablesDropped(b *testing.B) {
	for _, same := range []bool{false, true} {
		b.Run(map[bool]string{false: "new", true: "same"}[same], func(b *testing.B) {
			for range b.N {
				l := dynamotest.Start(b)
				c := l.Client(b)
				ctx := context.Background()
				var perWrite []float64
				name := ""
				for round := range 12 {
					if !same || round == 0 {
						name = dynamotest.TableName(b)
						if err := admin.CreateTable(ctx, c, name); err != nil {
							b.Fatal(err)
						}
					}
					cpu := testutil.ProcessCPU(l.Pid())
					writeItems(ctx, b, c, name)
					perWrite = append(perWrite, float64((testutil.ProcessCPU(l.Pid())-cpu).Microseconds())/1000/1000)
					if !same {
						_, _ = c.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: &name})
					}
				}
				b.Logf("DynamoDB Local CPU a write, ms, round by round: %.2f", perWrite)
				b.ReportMetric(perWrite[3], "ms-cpu/write@4")
				b.ReportMetric(perWrite[11], "ms-cpu/write@12")
			}
		})
	}
}

// writeItems adds 1 to 800 items of table, 1,000 writes from 8 writers.
func writeItems(ctx context.Context, b *testing.B, c *dynamodb.Client, table string) {
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for n := range 125 {
				_, err := c.UpdateItem(ctx, &dynamodb.UpdateItemInput{
					TableName:                 &table,
					Key:                       map[string]types.AttributeValue{"PK": &types.AttributeValueMemberS{Value: fmt.Sprintf("key-%d-%d", w, n%100)}, "SK": &types.AttributeValueMemberS{Value: "b"}},
					UpdateExpression:          aws.String("ADD n :one"),
					ExpressionAttributeValues: map[string]types.AttributeValue{":one": &types.AttributeValueMemberN{Value: "1"}},
				})
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}
