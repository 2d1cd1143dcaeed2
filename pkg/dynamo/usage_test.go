package dynamo_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/admin"
	"github.com/dynalimit/dynalimit/pkg/dynamo/usage"
)

var usageAt = time.Date(2026, 11, 26, 14, 30, 0, 0, time.UTC)

// usageRec is a record of mt millitokens on limit "rps" (and "day", twice
// as many) of entity e's resource "api".
func usageRec(id, e string, mt int64) usage.Entry {
	return usage.Entry{ID: id, At: usageAt, Usage: []usage.Usage{
		{Namespace: "default", Entity: e, Resource: "api", Limit: "rps", Millitokens: mt},
		{Namespace: "default", Entity: e, Resource: "api", Limit: "day", Millitokens: 2 * mt},
	}}
}

// txWatch checks every transaction: at most 100 items, none twice.
type txWatch struct {
	dynamo.API
	mu    sync.Mutex
	txs   int
	items int
	bad   []string
}

func (w *txWatch) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	w.mu.Lock()
	w.txs++
	w.items += len(in.TransactItems)
	seen := map[string]bool{}
	for _, ti := range in.TransactItems {
		k := ti.Put
		var key map[string]types.AttributeValue
		if k != nil {
			key = k.Item
		} else {
			key = ti.Update.Key
		}
		id := fmt.Sprint(key["PK"], key["SK"])
		if seen[id] {
			w.bad = append(w.bad, "twice: "+id)
		}
		seen[id] = true
	}
	if len(in.TransactItems) > 100 {
		w.bad = append(w.bad, fmt.Sprintf("%d items", len(in.TransactItems)))
	}
	w.mu.Unlock()
	return w.API.TransactWriteItems(ctx, in, o...)
}

func snapshotTotals(t *testing.T, s *dynamo.Store, entities int, w usage.Window) map[string]int64 {
	t.Helper()
	got := map[string]int64{}
	for i := range entities {
		e := fmt.Sprintf("e%d", i)
		snaps, err := usage.Of(s).Usage(context.Background(), "", e, "", w, usageAt.Add(-time.Minute))
		if err != nil {
			t.Fatalf("Usage(%s) = %v", e, err)
		}
		for _, sn := range snaps {
			for l, v := range sn.Limits {
				got[e+"/"+l] += v
			}
		}
	}
	return got
}

// TestApplyUsageExactlyOnce: records applied in groups that fit one
// transaction each, then delivered again (wholly, in part, with new ones
// among them, twice in one call): every snapshot holds each record once.
func TestApplyUsageExactlyOnce(t *testing.T) {
	f := newFakeTable(t)
	w := &txWatch{API: f}
	s := newStore(t, w, "t", newClock())
	var recs []usage.Entry
	want := map[string]int64{}
	for i := range 250 {
		e := fmt.Sprintf("e%d", i%40)
		recs = append(recs, usageRec(fmt.Sprintf("r%d", i), e, int64(i+1)))
		want[e+"/rps"] += int64(i + 1)
		want[e+"/day"] += 2 * int64(i+1)
	}
	recs = append(recs, usage.Entry{ID: "empty", At: usageAt})
	rep, err := usage.Of(s).ApplyUsage(context.Background(), recs[:200])
	if err != nil || rep.Applied != 200 || rep.Duplicates != 0 || len(rep.Failed) != 0 {
		t.Fatalf("ApplyUsage(200) = %+v, %v", rep, err)
	}
	if w.txs < 3 || rep.WriteUnits != 2*float64(w.items) {
		t.Errorf("ApplyUsage(200): %d transactions of %d items, %v write units; want several, 2 units an item", w.txs, w.items, rep.WriteUnits)
	}
	again := append(append([]usage.Entry(nil), recs[150:]...), recs[:10]...)
	again = append(again, recs[160])
	rep, err = usage.Of(s).ApplyUsage(context.Background(), again)
	if err != nil || rep.Applied != 51 || rep.Duplicates != 61 || len(rep.Failed) != 0 {
		t.Fatalf("ApplyUsage(again) = %+v, %v, want 51 applied (50 and the empty one), 61 duplicates", rep, err)
	}
	if len(w.bad) > 0 {
		t.Errorf("transactions: %v", w.bad)
	}
	for _, win := range usage.Windows {
		if got := snapshotTotals(t, s, 40, win); !reflect.DeepEqual(got, want) {
			t.Errorf("%s totals = %v, want %v", win, got, want)
		}
	}
}

// TestApplyUsageAnswerLost: a transaction that landed but whose answer was
// lost is sent again, finds its markers and counts nothing twice.
func TestApplyUsageAnswerLost(t *testing.T) {
	f := newFakeTable(t)
	l := &lossy{Fake: f}
	l.lose.Store(1)
	s := newStore(t, l, "t", newClock())
	rep, err := usage.Of(s).ApplyUsage(context.Background(), []usage.Entry{usageRec("1", "e0", 1000), usageRec("2", "e0", 500)})
	if err != nil || rep.Duplicates != 2 || len(rep.Failed) != 0 {
		t.Fatalf("ApplyUsage() = %+v, %v, want both found applied by the lost try", rep, err)
	}
	if got := snapshotTotals(t, s, 1, usage.Hourly); got["e0/rps"] != 1500 || got["e0/day"] != 3000 {
		t.Errorf("totals = %v, want rps 1500, day 3000", got)
	}
}

// TestApplyUsageFails: a table that keeps throttling, or is missing: every
// record is reported failed, with an error saying why, and nothing lands.
func TestApplyUsageFails(t *testing.T) {
	tests := []struct {
		name  string
		err   error
		want  error
		calls int
	}{
		{"throttled", &types.ProvisionedThroughputExceededException{Message: aws.String("slow down")}, dynamo.ErrThrottled, 4},
		{"no table", &types.ResourceNotFoundException{Message: aws.String("gone")}, dynamo.ErrNoTable, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeTable(t)
			s := newStore(t, f, "t", newClock())
			failOn(f, "TransactWriteItems", 0, tt.err)
			rep, err := usage.Of(s).ApplyUsage(context.Background(), []usage.Entry{usageRec("1", "e0", 1), usageRec("2", "e1", 1), {ID: "3", At: usageAt}})
			if !errors.Is(err, tt.want) || !reflect.DeepEqual(rep.Failed, []string{"1", "2"}) || rep.Applied != 1 {
				t.Errorf("ApplyUsage() = %+v, %v, want 1 and 2 failed (%v), 3 applied", rep, err, tt.want)
			}
			if got := f.Calls("TransactWriteItems"); got != tt.calls {
				t.Errorf("TransactWriteItems calls = %d, want %d", got, tt.calls)
			}
		})
	}
}

// TestUsageSnapshotItem: a snapshot's key, attributes and expiry.
func TestUsageSnapshotItem(t *testing.T) {
	f := newFakeTable(t)
	s := newStoreCfg(t, f, dynamo.Config{Table: "t", Timeout: time.Second, UsageRetention: 24 * time.Hour}, newClock())
	rec := usage.Entry{ID: "ev/1", At: usageAt, Usage: []usage.Usage{{Namespace: "team a", Entity: "org/x", Resource: "api", Limit: "per%20min", Millitokens: 7}}}
	if _, err := usage.Of(s).ApplyUsage(context.Background(), []usage.Entry{rec}); err != nil {
		t.Fatalf("ApplyUsage() = %v", err)
	}
	got := map[string]string{}
	for _, it := range f.Items("t") {
		pk, sk := it["PK"].(*types.AttributeValueMemberS).Value, it["SK"].(*types.AttributeValueMemberS).Value
		if strings.Contains(pk, "ENTITY") || strings.Contains(pk, "STREAM") {
			got[pk+" "+sk] = fmt.Sprint(it["ttl"].(*types.AttributeValueMemberN).Value, " ", it["u_per%20min"])
		}
	}
	end := func(d time.Time) string { return fmt.Sprint(d.Add(24*time.Hour).Unix(), " &{7 {}}") }
	want := map[string]string{
		"nteam%20a/ENTITY#org%2Fx #USAGE#api#h2026112614": end(time.Date(2026, 11, 26, 15, 0, 0, 0, time.UTC)),
		"nteam%20a/ENTITY#org%2Fx #USAGE#api#d20261126":   end(time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)),
		"nteam%20a/ENTITY#org%2Fx #USAGE#api#m202611":     end(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)),
	}
	for k := range got {
		if strings.HasPrefix(k, "_/STREAM#ev%2F1 #APPLIED") {
			delete(got, k)
			want["marker"] = "ok"
			got["marker"] = "ok"
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("items = %v, want %v", got, want)
	}
	snaps, err := usage.Of(s).Usage(context.Background(), "team a", "org/x", "api", usage.Daily, usageAt)
	if err != nil || len(snaps) != 1 || snaps[0].Limits["per min"] != 7 || snaps[0].Entity != "org/x" || !snaps[0].Start.Equal(time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("Usage(daily) = %+v, %v, want one snapshot of 7 on \"per min\"", snaps, err)
	}
}

// TestUsageReader: windows, since and resources.
func TestUsageReader(t *testing.T) {
	f := newFakeTable(t)
	s := newStore(t, f, "t", newClock())
	var recs []usage.Entry
	for h := range 30 {
		for _, r := range []string{"api", "batch"} {
			recs = append(recs, usage.Entry{ID: fmt.Sprint(r, h), At: usageAt.Add(time.Duration(h) * time.Hour), Usage: []usage.Usage{{Namespace: "default", Entity: "e", Resource: r, Limit: "rps", Millitokens: 1000}}})
		}
	}
	if _, err := usage.Of(s).ApplyUsage(context.Background(), recs); err != nil {
		t.Fatalf("ApplyUsage() = %v", err)
	}
	tests := []struct {
		resource string
		w        usage.Window
		since    time.Time
		want     []string // resource@start=rps
	}{
		{"api", usage.Daily, usageAt.Add(-48 * time.Hour), []string{"api@2026-11-26=10000", "api@2026-11-27=20000"}},
		{"", usage.Daily, usageAt.Add(20 * time.Hour), []string{"api@2026-11-27=20000", "batch@2026-11-27=20000"}},
		{"batch", usage.Monthly, usageAt, []string{"batch@2026-11-01=30000"}},
		{"api", usage.Hourly, usageAt.Add(28 * time.Hour), []string{"api@2026-11-27T18=1000", "api@2026-11-27T19=1000"}},
		{"other", usage.Hourly, usageAt, nil},
	}
	for _, tt := range tests {
		snaps, err := usage.Of(s).Usage(context.Background(), "", "e", tt.resource, tt.w, tt.since)
		if err != nil {
			t.Fatalf("Usage(%q, %s) = %v", tt.resource, tt.w, err)
		}
		var got []string
		for _, sn := range snaps {
			layout := "2006-01-02"
			if tt.w == usage.Hourly {
				layout = "2006-01-02T15"
			}
			got = append(got, fmt.Sprintf("%s@%s=%d", sn.Resource, sn.Start.Format(layout), sn.Limits["rps"]))
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Usage(%q, %s, %v) = %v, want %v", tt.resource, tt.w, tt.since, got, tt.want)
		}
	}
	if _, err := usage.Of(s).Usage(context.Background(), "", "e", "", usage.Window("weekly"), usageAt); err == nil {
		t.Errorf("Usage(weekly) = nil error, want one")
	}
}

func TestParseWindow(t *testing.T) {
	for _, w := range usage.Windows {
		if got, err := usage.ParseWindow(string(w)); got != w || err != nil {
			t.Errorf("ParseWindow(%q) = %q, %v", w, got, err)
		}
	}
	if _, err := usage.ParseWindow("weekly"); err == nil {
		t.Errorf("ParseWindow(weekly) = nil error, want one")
	}
}

// BenchmarkApplyUsage reports the write units (as the fake counts them:
// 2 per transaction item) per 1,000 records, for records on one hot bucket
// and on 1,000 buckets of different entities.
func BenchmarkApplyUsage(b *testing.B) {
	for _, spread := range []int{1, 10, 1000} {
		b.Run(fmt.Sprintf("entities=%d", spread), func(b *testing.B) {
			f := dynamotest.NewFake()
			if err := admin.CreateTable(context.Background(), f, "t"); err != nil {
				b.Fatal(err)
			}
			s, err := dynamo.NewStore(context.Background(), f, dynamo.Config{Table: "t", Timeout: time.Second})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			var units, writes float64
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				recs := make([]usage.Entry, 1000)
				for j := range recs {
					recs[j] = usageRec(fmt.Sprintf("%d-%d", i, j), fmt.Sprintf("e%d", j%spread), 1000)
				}
				rep, err := usage.Of(s).ApplyUsage(context.Background(), recs)
				if err != nil {
					b.Fatal(err)
				}
				units += rep.WriteUnits
				writes += float64(rep.Writes)
			}
			b.ReportMetric(units/float64(b.N), "WCU/1000rec")
			b.ReportMetric(writes/float64(b.N), "snapshot-writes/1000rec")
		})
	}
}
