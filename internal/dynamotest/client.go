package dynamotest

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/admin"
)

// Client returns a DynamoDB client for the endpoint (built by
// dynamo.NewClient, with optFns).
func (l *Local) Client(t testing.TB, optFns ...func(*dynamodb.Options)) *dynamodb.Client {
	t.Helper()
	c, err := dynamo.NewClient(context.Background(), l.Endpoint(), "us-east-1", optFns...)
	if err != nil {
		t.Fatalf("dynamotest: client: %v", err)
	}
	return c
}

var tableSeq atomic.Int64

// TableName returns a table name unique within the test binary, derived
// from t's name.
func TableName(t testing.TB) string {
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' || r == '_' {
			return r
		}
		return '_'
	}, t.Name())
	if len(name) > 200 {
		name = name[:200]
	}
	return fmt.Sprintf("%s_%d", name, tableSeq.Add(1))
}

// CreateTable creates table name on the endpoint with admin.CreateTable and
// fails t if it cannot; the table is deleted when t ends (DropAtCleanup).
func (l *Local) CreateTable(ctx context.Context, t testing.TB, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := admin.CreateTable(ctx, l.Client(t), name); err != nil {
		t.Fatalf("dynamotest: create table %s: %v", name, err)
	}
	l.DropAtCleanup(t, name)
}

// DropAtCleanup deletes table name when t ends (after the cleanups
// registered later, such as stopping the processes that use it). DynamoDB
// Local keeps every table, item and stream record of a run in its heap, so
// a long run that kept them would slow it down test after test; even
// dropped tables slow it, which the shared instance's fresh starts answer
// (recycleAfter). A table that is already gone is fine.
func (l *Local) DropAtCleanup(t testing.TB, name string) {
	t.Helper()
	c := l.Client(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = c.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: &name})
		l.mu.Lock()
		l.dropped++
		l.mu.Unlock()
	})
}
