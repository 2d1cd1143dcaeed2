package admin_test

import (
	"context"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/admin"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

func TestMain(m *testing.M) { os.Exit(dynamotest.Main(m)) }

// clock is a settable test clock.
type clock struct{ ms atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ms.Store(1_700_000_000_000)
	return c
}

func (c *clock) Now() time.Time          { return time.UnixMilli(c.ms.Load()) }
func (c *clock) Advance(d time.Duration) { c.ms.Add(d.Milliseconds()) }

// backend is a table on the fake or on DynamoDB Local.
type backend struct {
	name string
	api  func(t *testing.T) (dynamo.API, string)
}

func backends() []backend {
	return []backend{
		{"fake", func(t *testing.T) (dynamo.API, string) { return fakeTable(t), "t" }},
		{"local", func(t *testing.T) (dynamo.API, string) {
			l := dynamotest.Shared(t)
			name := dynamotest.TableName(t)
			l.CreateTable(context.Background(), t, name)
			return l.Client(t), name
		}},
	}
}

// fakeTable is the in-process fake with table "t" created.
func fakeTable(t *testing.T) *dynamotest.Fake {
	t.Helper()
	f := dynamotest.NewFake()
	if err := admin.CreateTable(context.Background(), f, "t"); err != nil {
		t.Fatalf("CreateTable(fake) = %v", err)
	}
	return f
}

func newStore(t *testing.T, api dynamo.API, table string, c *clock, opts ...dynamo.Option) *dynamo.Store {
	t.Helper()
	return newStoreCfg(t, api, dynamo.Config{Table: table, Timeout: 2 * time.Second, RejectionCacheSize: dynamo.RejectionCacheOff}, c, opts...)
}

func newStoreCfg(t *testing.T, api dynamo.API, cfg dynamo.Config, c *clock, opts ...dynamo.Option) *dynamo.Store {
	t.Helper()
	opts = append([]dynamo.Option{dynamo.WithClock(c.Now)}, opts...)
	s, err := dynamo.NewStore(context.Background(), api, cfg, opts...)
	if err != nil {
		t.Fatalf("NewStore() = %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// slowLimit is a limit of capacity tokens that refills one millitoken a
// day: nothing to speak of in a test.
func slowLimit(t *testing.T, capacity tokenbucket.Millitokens) tokenbucket.Limit {
	t.Helper()
	l, err := tokenbucket.NewLimit(capacity*tokenbucket.PerToken, 1, 24*time.Hour)
	if err != nil {
		t.Fatalf("NewLimit() = %v", err)
	}
	return l
}

func mustLimit(t testing.TB, n uint64, per time.Duration, burst uint64) tokenbucket.Limit {
	l, err := tokenbucket.Rate(n, per, burst)
	if err != nil {
		t.Fatalf("Rate(%d, %v, %d) = %v", n, per, burst, err)
	}
	return l
}

// serverError is DynamoDB failing a call (HTTP 500).
func serverError() error { return &types.InternalServerError{Message: new(string)} }

// transactionCanceled is a transaction DynamoDB cancelled, with one
// reason code per item.
func transactionCanceled(codes ...string) error {
	var reasons []types.CancellationReason
	for _, c := range codes {
		reasons = append(reasons, types.CancellationReason{Code: aws.String(c)})
	}
	return &types.TransactionCanceledException{Message: aws.String("cancelled"), CancellationReasons: reasons}
}

// failOn makes f fail op with err: every call when nth is 0, else only its
// nth call (counted from 1). It replaces any failure set before.
func failOn(f *dynamotest.Fake, op string, nth int64, err error) {
	var n atomic.Int64
	f.SetFail(func(_ context.Context, o string) error {
		if o == op && (nth == 0 || n.Add(1) == nth) {
			return err
		}
		return nil
	})
}

// bucketItems is every bucket item of f's table "t".
func bucketItems(f *dynamotest.Fake) []map[string]types.AttributeValue {
	var out []map[string]types.AttributeValue
	for _, it := range f.Items("t") {
		if pk, _ := it["PK"].(*types.AttributeValueMemberS); pk != nil && strings.Contains(pk.Value, "/BUCKET#") {
			out = append(out, it)
		}
	}
	return out
}

// pkOf is the partition key of an item or a key.
func pkOf(key map[string]types.AttributeValue) string {
	if v, ok := key["PK"].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}
