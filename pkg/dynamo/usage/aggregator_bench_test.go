package usage_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/usage"
)

// BenchmarkProcess reports records per second through Deltas and
// ApplyUsage on the fake, in batches of 100 (a Lambda's default batch),
// over 10 buckets: the aggregator's own cost, without DynamoDB's latency.
func BenchmarkProcess(b *testing.B) {
	f := dynamotest.NewFakeTable(b, "t")
	s, err := dynamo.NewStore(context.Background(), f, dynamo.Config{Table: "t", Timeout: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	a := usage.NewAggregator(usage.Of(s))
	batch := make([]usage.Record, 100)
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		for i := range batch {
			e := "e" + strconv.Itoa(i%10)
			tc := strconv.Itoa(1000 * (n + 1))
			batch[i] = usage.Record{ID: fmt.Sprint("ev-", n), Name: usage.Modify, At: at,
				Old: bucket(e, "api", "0", map[string]string{"rps": strconv.Itoa(1000 * n), "day": "0"}),
				New: bucket(e, "api", "0", map[string]string{"rps": tc, "day": tc})}
			n++
		}
		if failed, err := a.Process(context.Background(), batch); err != nil || len(failed) > 0 {
			b.Fatalf("Process() = %v, %v", failed, err)
		}
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "records/s")
}
