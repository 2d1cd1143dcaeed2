package dynamotest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// fakeTable returns a Fake holding table "t".
func fakeTable(t *testing.T) *Fake {
	t.Helper()
	f := NewFake()
	if _, err := f.CreateTable(context.Background(), &dynamodb.CreateTableInput{TableName: aws.String("t")}); err != nil {
		t.Fatalf("CreateTable() = %v", err)
	}
	return f
}

// keyOfPK is the key of the item of partition pk in table "t".
func keyOfPK(pk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"PK": s(pk), "SK": s("b")}
}

// addOne adds 1 to attribute c of pk's item.
func addOne(pk string) *dynamodb.UpdateItemInput {
	return &dynamodb.UpdateItemInput{
		TableName: aws.String("t"), Key: keyOfPK(pk),
		UpdateExpression:          aws.String("ADD c :one"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":one": n("1")},
	}
}

// attr returns attribute name of pk's item, "" when there is none.
func attr(t *testing.T, f *Fake, pk, name string) string {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	switch v := f.tables["t"][keyOf(keyOfPK(pk))][name].(type) {
	case *types.AttributeValueMemberN:
		return v.Value
	case *types.AttributeValueMemberS:
		return v.Value
	}
	return ""
}

// percentiles times calls of call, one after another, and returns the
// median and the 99th percentile.
func percentiles(t *testing.T, calls int, call func() error) (p50, p99 time.Duration) {
	t.Helper()
	took := make([]time.Duration, calls)
	for i := range took {
		start := time.Now()
		if err := call(); err != nil {
			t.Fatal(err)
		}
		took[i] = time.Since(start)
	}
	slices.Sort(took)
	return took[calls/2], took[calls*99/100]
}

// TestLatencyDistribution: under LikeDynamoDB's latencies a read and a
// write take 5 ms at the median and 20 ms at the 99th percentile, within
// 20%, and a transaction about twice a write.
func TestLatencyDistribution(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := fakeTable(t)
		f.SetOptions(Options{Latency: LikeDynamoDB().Latency})
		ctx := context.Background()
		const calls = 5000
		rp50, rp99 := percentiles(t, calls, func() error {
			_, err := f.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("t"), Key: keyOfPK("a")})
			return err
		})
		wp50, wp99 := percentiles(t, calls, func() error {
			_, err := f.UpdateItem(ctx, addOne("a"))
			return err
		})
		tp50, tp99 := percentiles(t, calls, func() error {
			_, err := f.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{{Update: &types.Update{
				TableName: aws.String("t"), Key: keyOfPK("a"), UpdateExpression: aws.String("ADD c :one"),
				ExpressionAttributeValues: map[string]types.AttributeValue{":one": n("1")},
			}}}})
			return err
		})
		t.Logf("read p50 %v p99 %v; write p50 %v p99 %v; transaction p50 %v p99 %v", rp50, rp99, wp50, wp99, tp50, tp99)
		for _, c := range []struct {
			name      string
			got, want time.Duration
		}{
			{"read p50", rp50, 5 * time.Millisecond},
			{"read p99", rp99, 20 * time.Millisecond},
			{"write p50", wp50, 5 * time.Millisecond},
			{"write p99", wp99, 20 * time.Millisecond},
		} {
			if c.got < c.want*8/10 || c.got > c.want*12/10 {
				t.Errorf("%s = %v, want %v ± 20%%", c.name, c.got, c.want)
			}
		}
		if r := float64(tp50) / float64(wp50); r < 1.8 || r > 2.6 {
			t.Errorf("transaction p50 = %v, %.2f× a write's, want about twice", tp50, r)
		}
		if tp99 <= wp99 {
			t.Errorf("transaction p99 = %v, want above a write's %v", tp99, wp99)
		}
	})
}

// TestLatencyContextEnds: a write takes effect halfway through its
// latency. A write whose context ends in the first half has no effect; one
// whose context ends in the second half landed, and answers the context's
// error.
func TestLatencyContextEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := fakeTable(t)
		f.SetOptions(Options{Latency: Latency{Write: Dist{P50: 10 * time.Millisecond}}})
		for _, c := range []struct {
			name   string
			budget time.Duration
			landed string
		}{
			{"ends in the first half", 3 * time.Millisecond, ""},
			{"ends in the second half", 7 * time.Millisecond, "1"},
		} {
			ctx, cancel := context.WithTimeout(context.Background(), c.budget)
			start := time.Now()
			_, err := f.UpdateItem(ctx, addOne(c.name))
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) != c.budget {
				t.Errorf("%s: UpdateItem() = %v after %v, want the deadline's error after %v", c.name, err, time.Since(start), c.budget)
			}
			if got := attr(t, f, c.name, "c"); got != c.landed {
				t.Errorf("%s: item's c = %q, want %q", c.name, got, c.landed)
			}
		}
	})
}

// TestLatencySleepInjected: a call's latency passes through Options.Sleep,
// a transaction's twice (prepare, commit); with no latency Sleep is never
// called.
func TestLatencySleepInjected(t *testing.T) {
	var slept []time.Duration
	sleep := func(_ context.Context, d time.Duration) error {
		slept = append(slept, d)
		return nil
	}
	f := fakeTable(t)
	ctx := context.Background()
	f.SetOptions(Options{Sleep: sleep})
	if _, err := f.UpdateItem(ctx, addOne("a")); err != nil || len(slept) != 0 {
		t.Fatalf("UpdateItem() with no latency = %v, slept %v, want no sleep", err, slept)
	}
	f.SetOptions(Options{Latency: Latency{Write: Dist{P50: 10 * time.Millisecond}}, Sleep: sleep})
	if _, err := f.UpdateItem(ctx, addOne("a")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{{Put: &types.Put{TableName: aws.String("t"), Item: keyOfPK("b")}}}}); err != nil {
		t.Fatal(err)
	}
	ms := time.Millisecond
	if want := []time.Duration{5 * ms, 5 * ms, 10 * ms, 10 * ms}; !slices.Equal(slept, want) {
		t.Errorf("slept %v, want %v (a write's halves, then a transaction's two rounds)", slept, want)
	}
}
