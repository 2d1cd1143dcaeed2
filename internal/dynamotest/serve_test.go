package dynamotest_test

import (
	"context"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/usage"
)

// TestServe: a store on an SDK client talking HTTP to Serve's endpoint
// opens (GetItem of the schema version), applies usage in a transaction,
// finds a record applied twice a duplicate (a cancelled transaction's
// reasons crossing the wire), and reads the usage back (a Query).
func TestServe(t *testing.T) {
	f := dynamotest.NewFakeTable(t, "t")
	client, err := dynamo.NewClient(context.Background(), dynamotest.Serve(t, f), "us-east-1")
	if err != nil {
		t.Fatal(err)
	}
	s, err := dynamo.NewStore(context.Background(), client, dynamo.Config{Table: "t", Timeout: time.Second})
	if err != nil {
		t.Fatalf("NewStore() = %v", err)
	}
	defer s.Close()
	rec := usage.Entry{ID: "ev-1", At: time.Now(), Usage: []usage.Usage{{Namespace: "n", Entity: "e", Resource: "r", Limit: "rpm", Millitokens: 7}}}
	if rep, err := usage.Of(s).ApplyUsage(context.Background(), []usage.Entry{rec}); err != nil || rep.Applied != 1 || rep.WriteUnits != 8 {
		t.Fatalf("ApplyUsage() = %+v, %v, want applied, 8 write units", rep, err)
	}
	if rep, err := usage.Of(s).ApplyUsage(context.Background(), []usage.Entry{rec}); err != nil || rep.Duplicates != 1 {
		t.Fatalf("ApplyUsage(again) = %+v, %v, want a duplicate", rep, err)
	}
	snaps, err := usage.Of(s).Usage(context.Background(), "n", "e", "r", usage.Hourly, time.Now().Add(-time.Hour))
	if err != nil || len(snaps) != 1 {
		t.Errorf("Usage() through Serve (a Query) = %+v, %v, want the one hour's snapshot", snaps, err)
	}
}
