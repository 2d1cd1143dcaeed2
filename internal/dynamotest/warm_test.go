package dynamotest

import (
	"context"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// TestWarmThroughputPartitions: an on-demand table created with a warm
// throughput starts with the partitions it needs at 1,000 write and 3,000
// read units a partition; one created without it, or with less than a new
// on-demand table's 4,000 and 12,000, with the four of a new table.
func TestWarmThroughputPartitions(t *testing.T) {
	for _, c := range []struct {
		name          string
		warm          *types.WarmThroughput
		want          int
		describeWrite int64
	}{
		{"none", nil, 4, 0},
		{"writes", &types.WarmThroughput{WriteUnitsPerSecond: aws.Int64(40_000)}, 40, 40_000},
		{"reads", &types.WarmThroughput{ReadUnitsPerSecond: aws.Int64(90_001)}, 31, 0},
		{"both", &types.WarmThroughput{WriteUnitsPerSecond: aws.Int64(10_500), ReadUnitsPerSecond: aws.Int64(30_000)}, 11, 10_500},
		{"below the default", &types.WarmThroughput{WriteUnitsPerSecond: aws.Int64(1_000)}, 4, 1_000},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := NewFake()
			p := OnDemand()
			f.SetOptions(Options{Throughput: LikeDynamoDB().Throughput, Partitions: &p})
			ctx := context.Background()
			if _, err := f.CreateTable(ctx, &dynamodb.CreateTableInput{TableName: aws.String("t"), WarmThroughput: c.warm}); err != nil {
				t.Fatalf("CreateTable() = %v", err)
			}
			if _, err := f.UpdateItem(ctx, addOne("k")); err != nil {
				t.Fatal(err)
			}
			if parts, splits := f.Partitions("t"); len(parts) != c.want || splits != 0 {
				t.Errorf("%d partitions, %d splits; want %d and 0", len(parts), splits, c.want)
			}
			out, err := f.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String("t")})
			if err != nil {
				t.Fatal(err)
			}
			var got int64
			if w := out.Table.WarmThroughput; w != nil {
				got = aws.ToInt64(w.WriteUnitsPerSecond)
			}
			if got != c.describeWrite {
				t.Errorf("DescribeTable's warm write units = %d, want %d", got, c.describeWrite)
			}
		})
	}
}

// TestWarmTableTakesItsThroughput: a table pre-warmed for 20,000 write units
// a second takes 10,000 a second spread over many items from its first
// second without a throttle, where a new table of four partitions
// throttles most of them.
func TestWarmTableTakesItsThroughput(t *testing.T) {
	for _, c := range []struct {
		name string
		warm *types.WarmThroughput
		cold bool
	}{
		{"pre-warmed", &types.WarmThroughput{WriteUnitsPerSecond: aws.Int64(20_000)}, false},
		{"new", nil, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := NewFake()
				p := OnDemand()
				f.SetOptions(Options{Throughput: LikeDynamoDB().Throughput, Partitions: &p})
				ctx := context.Background()
				if _, err := f.CreateTable(ctx, &dynamodb.CreateTableInput{TableName: aws.String("t"), WarmThroughput: c.warm}); err != nil {
					t.Fatalf("CreateTable() = %v", err)
				}
				throttled := 0
				for i := range 20_000 { // 2 s at 10,000 writes a second over 1,000 items
					if _, err := f.UpdateItem(ctx, addOne(keyN(i%1000))); err != nil {
						throttled++
					}
					time.Sleep(100 * time.Microsecond)
				}
				if c.cold && throttled < 5_000 || !c.cold && throttled > 0 {
					t.Errorf("%d of 20,000 writes throttled", throttled)
				}
			})
		})
	}
}

// keyN is the partition key of item n.
func keyN(n int) string { return "item-" + strconv.Itoa(n) }
