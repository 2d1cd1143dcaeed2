package dynamo_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/admin"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// TestChargesLandUnderContention: stream-end charges (Envoy's
// apply_on_stream_done) report cost already spent, and the caller does not
// wait for the answer: Envoy's call may give up first. Three replicas × 30
// callers charge one hot item 900 times with a budget of 200 ms a decision
// against DynamoDB Local, a third of the callers giving up after a
// millisecond, beside consumes on the same item. Every charge answered
// without error has landed, none has landed twice (a write that went
// unanswered is never written again), and the bucket holds exactly what
// the charges leave when none went unanswered.
func TestChargesLandUnderContention(t *testing.T) {
	const (
		replicas   = 3
		goroutines = 30
		each       = 10
		capacity   = 100_000
	)
	l := dynamotest.Shared(t)
	name := dynamotest.TableName(t)
	l.CreateTable(context.Background(), t, name)
	api := l.Client(t)
	// Refill is negligible: 100,000 tokens a century.
	bucket, err := tokenbucket.Rate(capacity, tokenbucket.MaxPeriod, 0)
	if err != nil {
		t.Fatalf("Rate() = %v", err)
	}
	key := cascade.Key{Namespace: "cost", Entity: "tenant", Resource: "tokens"}
	var stores []*dynamo.Store
	for range replicas {
		s, err := dynamo.NewStore(context.Background(), api, dynamo.Config{Table: name, Timeout: 200 * time.Millisecond, RejectionCacheSize: dynamo.RejectionCacheOff})
		if err != nil {
			t.Fatalf("NewStore() = %v", err)
		}
		stores = append(stores, s)
	}
	charge := &cascade.Plan{Debits: []cascade.Debit{{Key: key, Limit: "tpd", Bucket: bucket, Amount: tokenbucket.PerToken, Op: cascade.Charge}}}
	consume := &cascade.Plan{Debits: []cascade.Debit{{Key: key, Limit: "tpd", Bucket: bucket, Amount: 0, Op: cascade.Consume}}}
	var ok, failures atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for g := range replicas * goroutines {
		s := stores[g%replicas]
		wg.Go(func() {
			for i := range each {
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				if g%3 == 0 {
					ctx, cancel = context.WithTimeout(ctx, time.Millisecond) // the caller gives up
				}
				_, err := s.Acquire(ctx, charge)
				cancel()
				if err != nil {
					failures.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				} else {
					ok.Add(1)
				}
				if i%2 == 0 {
					_, _ = s.Acquire(context.Background(), consume) // contention beside
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d charges answered, %d failed (first: %v)", ok.Load(), failures.Load(), firstErr.Load())
	check := &cascade.Plan{Debits: []cascade.Debit{{Key: key, Limit: "tpd", Bucket: bucket, Op: cascade.Check}}}
	dec, err := stores[0].Acquire(context.Background(), check)
	if err != nil {
		t.Fatalf("Acquire(check) = %v", err)
	}
	landed := int64(capacity - dec.Statuses[0].Remaining/tokenbucket.PerToken)
	t.Logf("%d of %d charges landed", landed, replicas*goroutines*each)
	if landed > replicas*goroutines*each {
		t.Errorf("%d charges landed of %d sent: some landed twice", landed, replicas*goroutines*each)
	}
	if landed < ok.Load() {
		t.Errorf("%d charges landed, but %d were answered without error: some were lost", landed, ok.Load())
	}
	if failures.Load() == 0 && landed != replicas*goroutines*each {
		t.Errorf("%d charges landed, want all %d (none failed)", landed, replicas*goroutines*each)
	}
}

// TestChargeUnansweredIsNotWrittenTwice: a charge whose write goes
// unanswered (a 500: DynamoDB may have applied it) fails as unavailable and
// is not written again, on the caller's budget or any other; the next charge
// is written once.
func TestChargeUnansweredIsNotWrittenTwice(t *testing.T) {
	f := dynamotest.NewFake()
	if err := admin.CreateTable(context.Background(), f, "t"); err != nil {
		t.Fatalf("CreateTable() = %v", err)
	}
	s := newStoreCfg(t, f, dynamo.Config{Table: "t", Timeout: 50 * time.Millisecond, RejectionCacheSize: dynamo.RejectionCacheOff}, newClock())
	lim := mustLimit(t, 10, time.Hour, 0)
	charge := &cascade.Plan{Debits: []cascade.Debit{{Key: cascade.Key{Entity: "k", Resource: "r"}, Limit: "x", Bucket: lim, Amount: 1000, Op: cascade.Charge}}}
	var writes atomic.Int64
	f.SetFailItem(func(op, pk string) error {
		if op != "UpdateItem" || !strings.Contains(pk, "/BUCKET#") {
			return nil
		}
		if writes.Add(1) == 1 {
			return serverError()
		}
		return nil
	})
	if _, err := s.Acquire(context.Background(), charge); !errors.Is(err, dynamo.ErrUnavailable) {
		t.Fatalf("Acquire(charge) with its write unanswered = %v, want ErrUnavailable", err)
	}
	time.Sleep(100 * time.Millisecond) // anything queued again would have run by now
	if got := writes.Load(); got != 1 {
		t.Fatalf("%d writes of the unanswered charge, want 1", got)
	}
	if dec, err := s.Acquire(context.Background(), charge); err != nil || !dec.Admitted {
		t.Fatalf("Acquire(next charge) = %+v, %v", dec, err)
	}
	if got := writes.Load(); got != 2 {
		t.Errorf("%d writes after the next charge, want 2", got)
	}
}
