package rig

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/admin"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// Clock is a settable test clock, from 2023-11-14 22:13:20 UTC.
type Clock struct{ ms atomic.Int64 }

// NewClock returns a Clock at its start.
func NewClock() *Clock {
	c := &Clock{}
	c.ms.Store(1_700_000_000_000)
	return c
}

// Now is the clock's time.
func (c *Clock) Now() time.Time { return time.UnixMilli(c.ms.Load()) }

// Set sets the clock to ms (unix milliseconds).
func (c *Clock) Set(ms int64) { c.ms.Store(ms) }

// Advance moves the clock by d (whole milliseconds).
func (c *Clock) Advance(d time.Duration) { c.ms.Add(d.Milliseconds()) }

// Backend is a table on the fake or on DynamoDB Local.
type Backend struct {
	Name string
	API  func(t *testing.T) (dynamo.API, string)
}

// Backends are the fake, with table "t", and DynamoDB Local, with a table
// of the test's own.
func Backends() []Backend {
	return []Backend{
		{"fake", func(t *testing.T) (dynamo.API, string) { return FakeTable(t), "t" }},
		{"local", func(t *testing.T) (dynamo.API, string) {
			l := dynamotest.Shared(t)
			name := dynamotest.TableName(t)
			l.CreateTable(context.Background(), t, name)
			return l.Client(t), name
		}},
	}
}

// FakeTable is the in-process fake with table "t" created.
func FakeTable(t *testing.T) *dynamotest.Fake {
	t.Helper()
	f := dynamotest.NewFake()
	if err := admin.CreateTable(context.Background(), f, "t"); err != nil {
		t.Fatalf("CreateTable(fake) = %v", err)
	}
	return f
}

// NewStore is a store on table with a budget of 2 s and no rejection
// cache, on clock c, closed when t ends.
func NewStore(t *testing.T, api dynamo.API, table string, c *Clock, opts ...dynamo.Option) *dynamo.Store {
	t.Helper()
	return NewStoreCfg(t, api, dynamo.Config{Table: table, Timeout: 2 * time.Second, RejectionCacheSize: dynamo.RejectionCacheOff}, c, opts...)
}

// NewStoreCfg is a store of cfg on clock c, closed when t ends.
func NewStoreCfg(t *testing.T, api dynamo.API, cfg dynamo.Config, c *Clock, opts ...dynamo.Option) *dynamo.Store {
	t.Helper()
	opts = append([]dynamo.Option{dynamo.WithClock(c.Now)}, opts...)
	s, err := dynamo.NewStore(context.Background(), api, cfg, opts...)
	if err != nil {
		t.Fatalf("NewStore() = %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// MustLimit is n per per with a burst of burst (tokenbucket.Rate).
func MustLimit(t testing.TB, n uint64, per time.Duration, burst uint64) tokenbucket.Limit {
	t.Helper()
	l, err := tokenbucket.Rate(n, per, burst)
	if err != nil {
		t.Fatalf("Rate(%d, %v, %d) = %v", n, per, burst, err)
	}
	return l
}

// ServerError is DynamoDB failing a call (HTTP 500).
func ServerError() error { return &types.InternalServerError{Message: new(string)} }

// TransactionCanceled is a transaction DynamoDB cancelled, with one
// reason code per item.
func TransactionCanceled(codes ...string) error {
	var reasons []types.CancellationReason
	for _, c := range codes {
		reasons = append(reasons, types.CancellationReason{Code: aws.String(c)})
	}
	return &types.TransactionCanceledException{Message: aws.String("cancelled"), CancellationReasons: reasons}
}

// FailOn makes f fail op with err: every call when nth is 0, else only its
// nth call (counted from 1). It replaces any failure set before.
func FailOn(f *dynamotest.Fake, op string, nth int64, err error) {
	var n atomic.Int64
	f.SetFail(func(_ context.Context, o string) error {
		if o == op && (nth == 0 || n.Add(1) == nth) {
			return err
		}
		return nil
	})
}

// InBubble runs f in a synctest bubble, then checks that no goroutine
// outlived it.
func InBubble(t *testing.T, f func(t *testing.T)) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, f)
}

// PKOf is the partition key of an item key, "" when it has none.
func PKOf(key map[string]types.AttributeValue) string {
	if v, ok := key["PK"].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}
