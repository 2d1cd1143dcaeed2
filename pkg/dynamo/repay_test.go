package dynamo_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/item"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// timedOut is a call whose answer never came: it may have landed.
func timedOut(op string) error {
	return &smithy.OperationError{ServiceID: "DynamoDB", OperationName: op, Err: context.DeadlineExceeded}
}

// bucketItem returns shard sh of key's bucket item as the fake holds it.
func bucketItem(t *testing.T, f *dynamotest.Fake, key cascade.Key, sh int) map[string]types.AttributeValue {
	t.Helper()
	pk := item.BucketPK("default", key.Entity, key.Resource, sh)
	for _, it := range f.Items("t") {
		if item.GetS(it, item.AttrPK) == pk && item.GetS(it, item.AttrSK) == item.SKState {
			return it
		}
	}
	return nil
}

// consumed is limit's consumption counter in key's bucket item (shard 0).
func consumed(t *testing.T, f *dynamotest.Fake, key cascade.Key, limit string) int64 {
	t.Helper()
	return item.GetN(bucketItem(t, f, key, 0), item.LimitPrefix(limit)+"_"+item.FieldConsumed)
}

func repayment(replica string, stamp int64, key cascade.Key, lim tokenbucket.Limit, amount tokenbucket.Millitokens) *cascade.Repayment {
	return &cascade.Repayment{Replica: replica, Stamp: stamp, Key: key, Debits: []cascade.Debit{
		{Key: key, Limit: "p", Bucket: lim, Op: cascade.Charge, Amount: amount},
	}}
}

// TestRepayOnce: a repayment is charged once, as an UpdateItem and never a
// transaction; sent again it is a duplicate; its answer lost after it
// landed, the same repayment sent again is a duplicate; failed before it
// landed, it is applied by the next try.
func TestRepayOnce(t *testing.T) {
	lim := mustLimit(t, 10, time.Hour, 0)
	key := cascade.Key{Entity: "e", Resource: "r"}
	tests := []struct {
		name  string
		fault func(f *dynamotest.Fake, n *atomic.Int64) // on the first try
		first error                                     // what the first try reports
		again bool                                      // the second try reports a duplicate
	}{
		{"answered", nil, nil, true},
		{"answer lost after it landed", func(f *dynamotest.Fake, n *atomic.Int64) {
			f.SetLostItem(func(string) error {
				if n.Add(1) == 1 {
					return timedOut("UpdateItem")
				}
				return nil
			})
		}, cascade.ErrMayHaveLanded, true},
		{"failed before it landed", func(f *dynamotest.Fake, n *atomic.Int64) {
			f.SetFailItem(func(op, _ string) error {
				if op == "UpdateItem" && n.Add(1) == 1 {
					return timedOut("UpdateItem")
				}
				return nil
			})
		}, cascade.ErrMayHaveLanded, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeTable(t)
			c := newClock()
			s := newStoreCfg(t, f, dynamo.Config{Table: "t", Timeout: 50 * time.Millisecond, RejectionCacheSize: dynamo.RejectionCacheOff}, c)
			var n atomic.Int64
			if tt.fault != nil {
				tt.fault(f, &n)
			}
			r := repayment("r1", 1_700_000_000_000_000, key, lim, 3000)
			got, err := s.Repay(context.Background(), r)
			if !errors.Is(err, tt.first) || tt.first == nil && (err != nil || got.Duplicate || got.Statuses[0].Remaining != 7000) {
				t.Fatalf("Repay() = %+v, %v, want applied with 7000 left or %v", got, err, tt.first)
			}
			got, err = s.Repay(context.Background(), r)
			if err != nil || got.Duplicate != tt.again {
				t.Fatalf("Repay() again = %+v, %v, want duplicate %v", got, err, tt.again)
			}
			if got := consumed(t, f, key, "p"); got != 3000 {
				t.Errorf("consumed = %d, want 3000 (charged once)", got)
			}
			if n := f.Calls("TransactWriteItems"); n != 0 {
				t.Errorf("%d TransactWriteItems calls, want none: a repayment is the item's own write", n)
			}
			stamp := item.GetN(bucketItem(t, f, key, 0), item.RepaidAttr("r1"))
			if stamp != r.Stamp {
				t.Errorf("the item's stamp for r1 = %d, want %d", stamp, r.Stamp)
			}
		})
	}
}

// TestRepayInvalid: a repayment no store can apply is refused as invalid,
// and writes nothing.
func TestRepayInvalid(t *testing.T) {
	lim := mustLimit(t, 10, time.Hour, 0)
	key := cascade.Key{Entity: "e", Resource: "r"}
	f := newFakeTable(t)
	s := newStore(t, f, "t", newClock())
	for _, r := range []*cascade.Repayment{
		nil,
		repayment("", 1, key, lim, 1),
		repayment("a/b", 1, key, lim, 1),
		repayment(strings.Repeat("a", 65), 1, key, lim, 1),
		repayment("r", 0, key, lim, 1),
		repayment("r", 1, key, lim, -1),
		{Replica: "r", Stamp: 1, Key: key, Debits: []cascade.Debit{{Key: key, Limit: "p", Bucket: lim, Op: cascade.Consume, Amount: 1}}},
		{Replica: "r", Stamp: 1, Key: key, Debits: []cascade.Debit{{Key: cascade.Key{Entity: "other"}, Limit: "p", Bucket: lim, Op: cascade.Charge, Amount: 1}}},
	} {
		if _, err := s.Repay(context.Background(), r); !errors.Is(err, cascade.ErrInvalid) {
			t.Errorf("Repay(%+v) = %v, want ErrInvalid", r, err)
		}
	}
	if n := f.Calls("UpdateItem"); n != 0 {
		t.Errorf("%d UpdateItem calls, want none", n)
	}
}

// TestRepayProbeWrites: a repayment of nothing (a probe) is a real write:
// it tells that the store answers, and records the stamp.
func TestRepayProbeWrites(t *testing.T) {
	key := cascade.Key{Entity: "e", Resource: "r"}
	f := newFakeTable(t)
	s := newStore(t, f, "t", newClock())
	got, err := s.Repay(context.Background(), &cascade.Repayment{Replica: "r1", Stamp: 5, Key: key})
	if err != nil || got.Duplicate {
		t.Fatalf("Repay(probe) = %+v, %v, want applied", got, err)
	}
	if n := f.Calls("UpdateItem"); n != 1 {
		t.Errorf("%d UpdateItem calls, want 1", n)
	}
	if got := item.GetN(bucketItem(t, f, key, 0), item.RepaidAttr("r1")); got != 5 {
		t.Errorf("stamp = %d, want 5", got)
	}
}

// TestRepayDropsStaleStamps: a write drops the stamps of replicas whose
// last repayment is more than two hours old, and keeps the recent ones.
func TestRepayDropsStaleStamps(t *testing.T) {
	lim := mustLimit(t, 10, time.Hour, 0)
	key := cascade.Key{Entity: "e", Resource: "r"}
	f := newFakeTable(t)
	c := newClock()
	s := newStore(t, f, "t", c)
	nowUs := c.Now().UnixMicro()
	for i, r := range []*cascade.Repayment{
		repayment("old", nowUs-int64(3*time.Hour/time.Microsecond), key, lim, 1000),
		repayment("recent", nowUs-int64(time.Hour/time.Microsecond), key, lim, 1000),
		repayment("r1", nowUs, key, lim, 1000),
	} {
		if _, err := s.Repay(context.Background(), r); err != nil {
			t.Fatalf("Repay(%d) = %v", i, err)
		}
	}
	it := bucketItem(t, f, key, 0)
	if _, ok := it[item.RepaidAttr("old")]; ok {
		t.Errorf("the stamp of 3 h ago is still there: %v", it)
	}
	for _, r := range []string{"recent", "r1"} {
		if _, ok := it[item.RepaidAttr(r)]; !ok {
			t.Errorf("the stamp of %s is gone: %v", r, it)
		}
	}
	if got := consumed(t, f, key, "p"); got != 3000 {
		t.Errorf("consumed = %d, want 3000", got)
	}
}

// TestRepayOnceProperty sends, from three replicas at once, repayments
// and decisions on one bucket item of the fake, with random amounts, while
// UpdateItem calls at random fail before landing or land with their answer
// lost; each replica sends each repayment again, same stamp, until it is
// answered applied or duplicate, and sometimes once more after that. Every
// millitoken repaid is charged to the item exactly once: its consumption
// counter for the repaid limit is the sum of the repayments.
//
// With DynamoDB's latencies (dynamotest.LikeDynamoDB) and a budget of 8 ms,
// calls also run out while in flight: some took effect, some did not.
func TestRepayOnceProperty(t *testing.T) {
	for seed := range uint64(30) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			repayProperty(t, seed, nil, 50*time.Millisecond)
		})
	}
	for seed := range uint64(6) {
		t.Run(fmt.Sprintf("latency-%d", seed), func(t *testing.T) {
			o := dynamotest.LikeDynamoDB()
			o.Seed = seed + 1
			repayProperty(t, seed, &o, 8*time.Millisecond)
		})
	}
}

func repayProperty(t *testing.T, seed uint64, model *dynamotest.Options, timeout time.Duration) {
	lim := mustLimit(t, 1_000_000_000, time.Hour, 0)
	key := cascade.Key{Entity: "e", Resource: "r"}
	f := newFakeTable(t)
	if model != nil {
		f.SetOptions(*model)
	}
	c := newClock()
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(seed, 37))
	chance := func(p float64) bool {
		mu.Lock()
		defer mu.Unlock()
		return rng.Float64() < p
	}
	draw := func(n int) int {
		mu.Lock()
		defer mu.Unlock()
		return rng.IntN(n)
	}
	pFail, pLost := 0.1+0.3*float64(seed%3)/2, 0.1+0.3*float64(seed%4)/3
	f.SetFailItem(func(op, _ string) error {
		if op == "UpdateItem" && chance(pFail) {
			return timedOut(op)
		}
		return nil
	})
	f.SetLostItem(func(string) error {
		if chance(pLost) {
			return timedOut("UpdateItem")
		}
		return nil
	})
	var want atomic.Int64
	var wg sync.WaitGroup
	for r := range 3 {
		s := newStoreCfg(t, f, dynamo.Config{Table: "t", Timeout: timeout, RejectionCacheSize: dynamo.RejectionCacheOff}, c)
		replica := fmt.Sprintf("r%d", r)
		wg.Go(func() {
			stamp := int64(1_700_000_000_000_000)
			for range 25 {
				if chance(0.5) { // a decision on another limit of the item, in the same lane
					plan := &cascade.Plan{Debits: []cascade.Debit{{Key: key, Limit: "d", Bucket: lim, Op: cascade.Consume, Amount: tokenbucket.Millitokens(1 + draw(5000))}}}
					_, _ = s.Acquire(context.Background(), plan)
					continue
				}
				stamp += int64(1 + draw(1000))
				amount := int64(draw(10_000))
				rp := repayment(replica, stamp, key, lim, tokenbucket.Millitokens(amount))
				resends := 1 + draw(2) // answers wanted: the first, then duplicates
				answered := false
				for tries := 0; resends > 0; tries++ {
					if tries > 500 {
						t.Errorf("%s: repayment %d not answered in 500 tries", replica, stamp)
						return
					}
					got, err := s.Repay(context.Background(), rp)
					if err != nil {
						if errors.Is(err, cascade.ErrInvalid) {
							t.Errorf("Repay() = %v", err)
							return
						}
						continue // unanswered or too busy: the same repayment again
					}
					if answered && !got.Duplicate {
						t.Errorf("%s: repayment %d answered applied after it was answered before", replica, stamp)
					}
					answered = true
					resends--
				}
				want.Add(amount)
			}
		})
	}
	wg.Wait()
	f.SetFailItem(nil)
	f.SetLostItem(nil)
	if got := consumed(t, f, key, "p"); got != want.Load() {
		t.Errorf("seed %d (fail %.2f, lost %.2f): the item counts %d millitokens repaid, want %d: a repayment charged %s", seed, pFail, pLost, got, want.Load(), map[bool]string{true: "twice", false: "never"}[got > want.Load()])
	}
}

// TestRepayStaleImageIsStillOnce: a batch decided on an image from before
// the repayment landed (a read that raced the write, a cache of another
// instance) does not see the stamp, and would charge again; the write's
// condition on the stamp refuses it, and the batch, decided again on what
// DynamoDB returns, finds it a duplicate.
func TestRepayStaleImageIsStillOnce(t *testing.T) {
	lim := mustLimit(t, 10, time.Hour, 0)
	key := cascade.Key{Entity: "e", Resource: "r"}
	f := newFakeTable(t)
	c := newClock()
	a, b := newStore(t, f, "t", c), newStore(t, f, "t", c)
	check := &cascade.Plan{Debits: []cascade.Debit{{Key: key, Limit: "p", Bucket: lim, Op: cascade.Consume, Amount: 1000}}}
	if _, err := b.Acquire(context.Background(), check); err != nil { // b caches the item as it was
		t.Fatal(err)
	}
	r := repayment("r1", 42, key, lim, 3000)
	if got, err := a.Repay(context.Background(), r); err != nil || got.Duplicate {
		t.Fatalf("Repay(a) = %+v, %v, want applied", got, err)
	}
	got, err := b.Repay(context.Background(), r)
	if err != nil || !got.Duplicate {
		t.Errorf("Repay(b) on its stale image = %+v, %v, want a duplicate", got, err)
	}
	if got := consumed(t, f, key, "p"); got != 4000 {
		t.Errorf("consumed = %d, want 4000 (1000 decided, 3000 repaid once)", got)
	}
}
