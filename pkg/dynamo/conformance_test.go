package dynamo_test

import (
	"context"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/internal/israce"
	"github.com/dynalimit/dynalimit/internal/storetest"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/admin"
)

func conformanceStore(t *testing.T, api dynamo.API, table string, now func() time.Time) *dynamo.Store {
	t.Helper()
	// The suites check what a bucket holds exactly on one item: the fake
	// takes far more than an item's 1,000 writes a second, so doubling
	// on the write rate is off here (shard_test.go and resize_test.go
	// test it).
	s, err := dynamo.NewStore(context.Background(), api, dynamo.Config{Table: table, Timeout: 5 * time.Second, RejectionCacheSize: dynamo.RejectionCacheOff, ShardWriteRate: -1}, dynamo.WithClock(now))
	if err != nil {
		t.Fatalf("NewStore(%s) = %v", table, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestConformanceFake(t *testing.T) {
	// Under -short (the fast loop, and each mutant of make mutation) every
	// millisecond becomes every 10 ms: 60,001 calls instead of 600,001, the
	// same exact answer, 2 s instead of 22 s. So under the race detector,
	// which takes 124 s over the whole suite: make test runs that again
	// without it, in its last pass, where every call of the suite is made.
	var opts []storetest.Option
	if testing.Short() || israce.Enabled {
		opts = append(opts, storetest.WithMaxCalls(60_001))
	}
	storetest.Run(t, func(t *testing.T, clock *storetest.Clock) storetest.Store {
		f := dynamotest.NewFake()
		if err := admin.CreateTable(context.Background(), f, "t"); err != nil {
			t.Fatalf("CreateTable(fake) = %v", err)
		}
		return conformanceStore(t, f, "t", clock.Now)
	}, opts...)
}

func TestConformanceLocal(t *testing.T) {
	l := dynamotest.Shared(t)
	storetest.Run(t, func(t *testing.T, clock *storetest.Clock) storetest.Store {
		name := dynamotest.TableName(t)
		l.CreateTable(context.Background(), t, name)
		return conformanceStore(t, l.Client(t), name, clock.Now)
	}, storetest.WithMaxCalls(2001)) // DynamoDB Local: a few ms a write
}

func TestConcurrencyFake(t *testing.T) {
	storetest.RunConcurrency(t, func(t *testing.T) []storetest.Store {
		f := dynamotest.NewFake()
		if err := admin.CreateTable(context.Background(), f, "t"); err != nil {
			t.Fatalf("CreateTable(fake) = %v", err)
		}
		return []storetest.Store{conformanceStore(t, f, "t", time.Now), conformanceStore(t, f, "t", time.Now), conformanceStore(t, f, "t", time.Now)}
	})
}

// TestConcurrencyLocal runs the concurrency tests on DynamoDB Local, with a
// third of the overlapping plans (its transactions take 50-100 ms each:
// the fake runs all of them).
func TestConcurrencyLocal(t *testing.T) {
	l := dynamotest.Shared(t)
	storetest.RunConcurrency(t, func(t *testing.T) []storetest.Store {
		name := dynamotest.TableName(t)
		l.CreateTable(context.Background(), t, name)
		api := l.Client(t)
		return []storetest.Store{conformanceStore(t, api, name, time.Now), conformanceStore(t, api, name, time.Now), conformanceStore(t, api, name, time.Now)}
	}, storetest.WithMaxCalls(1600))
}

var _ storetest.Settler = (*dynamo.Store)(nil)

func TestSettleConformanceFake(t *testing.T) {
	storetest.RunSettle(t, func(t *testing.T, clock *storetest.Clock) storetest.Settler {
		f := dynamotest.NewFake()
		if err := admin.CreateTable(context.Background(), f, "t"); err != nil {
			t.Fatalf("CreateTable(fake) = %v", err)
		}
		return conformanceStore(t, f, "t", clock.Now)
	})
}

func TestSettleConformanceLocal(t *testing.T) {
	l := dynamotest.Shared(t)
	storetest.RunSettle(t, func(t *testing.T, clock *storetest.Clock) storetest.Settler {
		name := dynamotest.TableName(t)
		l.CreateTable(context.Background(), t, name)
		return conformanceStore(t, l.Client(t), name, clock.Now)
	}, storetest.WithMaxCalls(200))
}

// The settlement concurrency tests run on three replicas of one table.
func TestSettleConcurrencyFake(t *testing.T) {
	storetest.RunSettleConcurrency(t, func(t *testing.T) []storetest.Settler {
		f := dynamotest.NewFake()
		if err := admin.CreateTable(context.Background(), f, "t"); err != nil {
			t.Fatalf("CreateTable(fake) = %v", err)
		}
		return []storetest.Settler{conformanceStore(t, f, "t", time.Now), conformanceStore(t, f, "t", time.Now), conformanceStore(t, f, "t", time.Now)}
	})
}

func TestSettleConcurrencyLocal(t *testing.T) {
	l := dynamotest.Shared(t)
	storetest.RunSettleConcurrency(t, func(t *testing.T) []storetest.Settler {
		name := dynamotest.TableName(t)
		l.CreateTable(context.Background(), t, name)
		api := l.Client(t)
		return []storetest.Settler{conformanceStore(t, api, name, time.Now), conformanceStore(t, api, name, time.Now), conformanceStore(t, api, name, time.Now)}
	})
}
