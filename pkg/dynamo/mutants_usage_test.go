package dynamo_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/admin"
	"github.com/dynalimit/dynalimit/pkg/dynamo/usage"
	"github.com/dynalimit/dynalimit/pkg/dynamo/warm"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// Equivalent mutants, read by internal/mutants (make mutation):
//
// mutant: CONDITIONALS_BOUNDARY usagewrite.go `len(g.recs) > 0` ApplyUsage: applyGroup of an empty group tries nothing (its loop wants records) and returns nil, which errors.Join drops.
// mutant: CONDITIONALS_BOUNDARY usagewrite.go `attempt < usageTries && len(g.recs) > 0` applyGroup: a group whose records all turned out applied would send a transaction of no items, which DynamoDB refuses as invalid and the fake takes; either way the call ends with nothing failed.
// mutant: CONDITIONALS_BOUNDARY usagewrite.go `first(out[i]) < first(out[j])` uniqueRecords: records of one first snapshot item change places within the order, which only decides which transaction carries them; every one is applied once either way.
// mutant: CONDITIONALS_BOUNDARY usagewrite.go `len(tce.CancellationReasons) < len(g.recs)` duplicateMarkers: a cancelled transaction gives a reason per item, markers and snapshots, so its reasons always outnumber its records.
// mutant: CONDITIONALS_BOUNDARY usageread.go `out[i].Resource < out[j].Resource` Usage: one snapshot item holds a window's every limit of a resource, so no two snapshots share a start and a resource.

// TestUsageGroupsFillTransactions: 97 records on one entity and resource
// (each adding to its 3 snapshot items) make one transaction of 100 items,
// the most DynamoDB takes; 98 make two. Each record's marker lives 48
// hours.
func TestUsageGroupsFillTransactions(t *testing.T) {
	for _, c := range []struct{ recs, txs int }{{97, 1}, {98, 2}} {
		f := fakeTable(t)
		clk := newClock()
		s := newStore(t, f, "t", clk)
		var recs []usage.Entry
		for i := range c.recs {
			recs = append(recs, usage.Entry{ID: "r" + strconv.Itoa(i), At: clk.Now(), Usage: []usage.Usage{{Namespace: "default", Entity: "e", Resource: "r", Limit: "rpm", Millitokens: 1000}}})
		}
		before := f.Calls("TransactWriteItems")
		rep, err := usage.Of(s).ApplyUsage(context.Background(), recs)
		if err != nil || rep.Applied != c.recs {
			t.Fatalf("ApplyUsage(%d records) = %+v, %v", c.recs, rep, err)
		}
		if n := f.Calls("TransactWriteItems") - before; n != c.txs {
			t.Errorf("ApplyUsage(%d records on one resource): %d transactions, want %d", c.recs, n, c.txs)
		}
		want := strconv.FormatInt(clk.Now().UnixMilli()/1000+48*3600, 10)
		markers := 0
		for _, it := range f.Items("t") {
			if it["SK"].(*types.AttributeValueMemberS).Value == "#APPLIED" {
				markers++
				if got := it["ttl"].(*types.AttributeValueMemberN).Value; got != want {
					t.Fatalf("marker %s ttl = %s, want %s (48 hours)", pkOf(it), got, want)
				}
			}
		}
		if markers != c.recs {
			t.Errorf("%d markers, want %d", markers, c.recs)
		}
	}
}

// TestOrphanNamedByItsKey: a namespace is listed under the name its items
// carry, or, for one whose items carry none (a replica's warm-up items
// only), the name its keys hold.
func TestOrphanNamedByItsKey(t *testing.T) {
	f := fakeTable(t)
	s := newStore(t, f, "t", newClock())
	p := &cascade.Plan{Debits: []cascade.Debit{{Key: cascade.Key{Namespace: "stray", Entity: "e", Resource: "r"}, Limit: "rpm", Bucket: mustLimit(t, 10, time.Minute, 0), Amount: tokenbucket.PerToken}}}
	if _, err := s.Acquire(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	ghost := newStoreCfg(t, f, dynamo.Config{Table: "t", Namespace: "ghost", Timeout: time.Second}, newClock())
	if _, err := warm.Run(context.Background(), ghost.Table(), warm.Options{Conns: 1}); err != nil {
		t.Fatal(err)
	}
	got, err := admin.New(s).Orphans(context.Background())
	if err != nil || len(got) != 2 || got[0].Name != "ghost" || got[1].Name != "stray" {
		t.Errorf("Orphans() = %+v, %v, want ghost and stray", got, err)
	}
}
