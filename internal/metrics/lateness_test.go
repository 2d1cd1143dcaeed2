package metrics_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/prometheus/client_golang/prometheus"

	harness "github.com/dynalimit/dynalimit/internal/testutil"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/internal/metrics"
)

// TestTimeoutCause: a call that runs out of its budget counts as
// process_late while the process is late for that budget, as store
// otherwise; a call that answers counts as neither.
func TestTimeoutCause(t *testing.T) {
	reg := prometheus.NewRegistry()
	fake := dynamotest.NewFake()
	var late atomic.Bool
	var asked atomic.Int64 // the budget the last timeout was judged on (ns)
	api := dynamotest.SDKClient(fake, metrics.DynamoDBLate(reg, func(budget time.Duration) bool {
		asked.Store(int64(budget))
		return late.Load()
	}))
	fake.SetFail(func(ctx context.Context, op string) error {
		<-ctx.Done()
		return ctx.Err()
	})
	get := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		_, _ = api.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("t"), Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "x"}}})
	}
	late.Store(true)
	get()
	late.Store(false)
	get()
	get()
	for cause, want := range map[string]float64{"process_late": 1, "store": 2} {
		if n := harness.CounterValue(t, reg, "ratelimit_dynamodb_timeouts_total", map[string]string{"operation": "GetItem", "cause": cause}); n != want {
			t.Errorf("timeouts_total{cause=%q} = %v, want %v", cause, n, want)
		}
	}
	if b := time.Duration(asked.Load()); b < 20*time.Millisecond {
		t.Errorf("judged on a budget of %v, want the call's time, at least its 20 ms", b)
	}
	if n := harness.CounterValue(t, reg, "ratelimit_dynamodb_calls_total", map[string]string{"operation": "GetItem", "outcome": "timeout"}); n != 3 {
		t.Errorf("calls_total{outcome=timeout} = %v, want 3", n)
	}
}

// TestProcessLateness: what the meter measures lands in the histogram.
func TestProcessLateness(t *testing.T) {
	reg := prometheus.NewRegistry()
	observe := metrics.ProcessLateness(reg)
	observe(3 * time.Millisecond)
	observe(0)
	fams, err := reg.Gather()
	if err != nil || len(fams) != 1 || fams[0].GetName() != "ratelimit_process_lateness_seconds" {
		t.Fatalf("gathered %v, %v", fams, err)
	}
	h := fams[0].GetMetric()[0].GetHistogram()
	if h.GetSampleCount() != 2 || h.GetSampleSum() != 0.003 {
		t.Errorf("%d samples summing to %v, want 2 and 0.003", h.GetSampleCount(), h.GetSampleSum())
	}
}
