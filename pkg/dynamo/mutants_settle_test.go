package dynamo_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// Equivalent mutants, read by internal/mutants (make mutation):
//
// mutant: CONDITIONALS_BOUNDARY settle.go `sh > 0` settleTargets: at shard 0, sh = 0 changes nothing.

// slowCanceled answers every transaction, after a millisecond whatever its
// deadline, as cancelled by a failed condition.
type slowCanceled struct{ dynamo.API }

func (s slowCanceled) TransactWriteItems(context.Context, *dynamodb.TransactWriteItemsInput, ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	time.Sleep(time.Millisecond)
	return nil, transactionCanceled("None", "ConditionalCheckFailed")
}

// TestSettleGivesUpInTime: a settlement whose transaction DynamoDB keeps
// throttling is tried again after a backoff, a few dozen times over its
// budget of a second, then fails as unavailable; one whose bucket
// conditions keep failing is decided again at once, and fails saying so.
func TestSettleGivesUpInTime(t *testing.T) {
	key := cascade.Key{Entity: "e", Resource: "r"}
	lim := mustLimit(t, 10, time.Hour, 0)
	for _, c := range []struct {
		name     string
		err      error
		maxCalls int
		says     string
	}{
		{"throttled", throttled(), 100, "throttled"},
		{"conditions failing", nil, 0, "bucket conditions kept failing"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := fakeTable(t)
			clk := newClock()
			var api dynamo.API = f
			if c.err == nil {
				api = slowCanceled{f}
			}
			s := newStoreCfg(t, api, dynamo.Config{Table: "t", Timeout: 100 * time.Millisecond, RejectionCacheSize: dynamo.RejectionCacheOff, ShardWriteRate: -1}, clk)
			f.SetFail(func(_ context.Context, op string) error {
				if op == "TransactWriteItems" && c.err != nil {
					return c.err
				}
				return nil
			})
			_, err := s.Settle(context.Background(), settlement(clk, "s1", cascade.Debit{Key: key, Limit: "x", Bucket: lim, Amount: 3000, Op: cascade.Charge}))
			if !errors.Is(err, dynamo.ErrUnavailable) || !strings.Contains(err.Error(), c.says) {
				t.Errorf("Settle() = %v, want ErrUnavailable saying %q", err, c.says)
			}
			if n := f.Calls("TransactWriteItems"); c.maxCalls > 0 && n > c.maxCalls {
				t.Errorf("%d transactions in the budget, want at most %d (a backoff between tries)", n, c.maxCalls)
			}
		})
	}
}

// TestSettleOnCachedImage: a settlement decides on the image this replica
// holds while it is at most a second old, and reads an older one again.
func TestSettleOnCachedImage(t *testing.T) {
	key := cascade.Key{Entity: "e", Resource: "r"}
	lim := mustLimit(t, 10, time.Hour, 0)
	for _, c := range cachedImageAges {
		t.Run(c.age.String(), func(t *testing.T) {
			f := fakeTable(t)
			clk := newClock()
			s := newStore(t, f, "t", clk)
			p := &cascade.Plan{Debits: []cascade.Debit{{Key: key, Limit: "x", Bucket: lim, Amount: tokenbucket.PerToken}}}
			if dec, err := s.Acquire(context.Background(), p); err != nil || !dec.Admitted {
				t.Fatalf("Acquire() = %+v, %v", dec, err)
			}
			clk.Advance(c.age)
			before := f.Calls("GetItem")
			if _, err := s.Settle(context.Background(), settlement(clk, "s1", cascade.Debit{Key: key, Limit: "x", Bucket: lim, Amount: 3000, Op: cascade.Charge})); err != nil {
				t.Fatal(err)
			}
			if got := f.Calls("GetItem") - before; got != c.reads {
				t.Errorf("reads of a settlement on an image %v old = %d, want %d", c.age, got, c.reads)
			}
		})
	}
}
