package usage_test

import (
	"context"
	"errors"
	"maps"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	dadmin "github.com/dynalimit/dynalimit/pkg/dynamo/admin"
	"github.com/dynalimit/dynalimit/pkg/dynamo/usage"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// counts is an Observer that adds up what it is told.
type counts struct {
	mu                                  sync.Mutex
	applied, failed, duplicates, writes int
}

func (c *counts) Records(outcome string, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if outcome == usage.OutcomeFailed {
		c.failed += n
	} else {
		c.applied += n
	}
}

func (c *counts) Duplicates(n int) { c.mu.Lock(); c.duplicates += n; c.mu.Unlock() }

func (c *counts) SnapshotWrites(n int) { c.mu.Lock(); c.writes += n; c.mu.Unlock() }

func mustRate(t *testing.T, n uint64, per time.Duration) tokenbucket.Limit {
	t.Helper()
	l, err := tokenbucket.Rate(n, per, 0)
	if err != nil {
		t.Fatalf("Rate(%d, %v) = %v", n, per, err)
	}
	return l
}

func newStore(t *testing.T, api dynamo.API, now time.Time) *dynamo.Store {
	t.Helper()
	s, err := dynamo.NewStore(context.Background(), api, dynamo.Config{Table: "t", Timeout: 2 * time.Second, RejectionCacheSize: dynamo.RejectionCacheOff},
		dynamo.WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatalf("NewStore() = %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func consume(key cascade.Key, limit string, l tokenbucket.Limit, tokens int64, depth uint8) cascade.Debit {
	return cascade.Debit{Key: key, Limit: limit, Bucket: l, Amount: tokenbucket.Millitokens(tokens) * tokenbucket.PerToken, Depth: depth}
}

// decide runs plans on the store and adds what each admitted plan
// consumed to want, by entity and limit.
func decide(t *testing.T, s *dynamo.Store, want map[string]int64, plans ...*cascade.Plan) {
	t.Helper()
	for _, p := range plans {
		dec, err := s.Acquire(context.Background(), p)
		if err != nil {
			t.Fatalf("Acquire() = %v", err)
		}
		if !dec.Admitted {
			continue
		}
		for _, d := range p.Debits {
			want[d.Key.Entity+"/"+d.Limit] += int64(d.Amount)
		}
	}
}

// TestUsageFromStream drives a store through a fake with a stream:
// plain, sharded and hierarchical buckets, a refused two-item plan whose
// consumed part is given back, and a settlement's charge and refund. The
// records, processed in small batches and then all again, out of order,
// leave snapshots holding exactly what the admitted plans consumed, in
// every window.
func TestUsageFromStream(t *testing.T) {
	at := time.Date(2026, 11, 26, 14, 30, 0, 0, time.UTC)
	f := dynamotest.NewFakeTable(t, "t")
	st := &streamed{Fake: f, table: "t", at: at}
	s := newStore(t, st, at)
	big, small := mustRate(t, 1000000, time.Hour), mustRate(t, 5, time.Hour)
	key := func(e string) cascade.Key { return cascade.Key{Entity: e, Resource: "api"} }
	if err := dadmin.New(s).SetShards(context.Background(), key("b"), 4, map[string]tokenbucket.Limit{"rps": big}); err != nil {
		t.Fatalf("SetShards() = %v", err)
	}
	want := map[string]int64{}
	var plans []*cascade.Plan
	for i := range 60 {
		cost := int64(i%3 + 1)
		plans = append(plans,
			&cascade.Plan{Debits: []cascade.Debit{consume(key("a"), "rps", big, cost, 0), consume(key("a"), "day", big, 2*cost, 0)}},
			&cascade.Plan{Debits: []cascade.Debit{consume(key("b"), "rps", big, cost, 0)}},
			&cascade.Plan{Debits: []cascade.Debit{consume(key("k1#route=%2Fv1"), "rps", big, cost, 0), consume(key("proj#route=%2Fv1"), "rps", big, cost, 1)}})
	}
	drain := &cascade.Plan{Debits: []cascade.Debit{consume(key("d"), "rps", small, 5, 0)}}
	refused := &cascade.Plan{Debits: []cascade.Debit{consume(key("c"), "rps", big, 3, 0), consume(key("d"), "rps", small, 1, 0)}}
	decide(t, s, want, append(plans, drain, refused)...)
	if _, ok := want["c/rps"]; ok {
		t.Fatalf("the plan over c and d was admitted: the test wants it refused")
	}
	settled, err := s.Settle(context.Background(), &cascade.Settlement{ID: "lease-1", Expires: at.Add(time.Hour), Debits: []cascade.Debit{
		{Key: key("a"), Limit: "rps", Bucket: big, Amount: 2500, Op: cascade.Charge},
		{Key: key("a"), Limit: "day", Bucket: big, Amount: 700, Op: cascade.Refund},
	}})
	if err != nil || settled.Duplicate {
		t.Fatalf("Settle() = %+v, %v", settled, err)
	}
	want["a/rps"] += 2500
	want["a/day"] -= 700
	want["c/rps"] = 0 // consumed, then given back: a refused plan counts nothing
	want["k1/rps"], want["proj/rps"] = want["k1#route=%2Fv1/rps"], want["proj#route=%2Fv1/rps"]
	delete(want, "k1#route=%2Fv1/rps")
	delete(want, "proj#route=%2Fv1/rps")

	recs := st.records()
	obs := &counts{}
	a := usage.NewAggregator(usage.Of(newStore(t, f, at)), usage.WithObserver(obs))
	for i := 0; i < len(recs); i += 7 {
		if failed, err := a.Process(context.Background(), recs[i:min(i+7, len(recs))]); err != nil || len(failed) > 0 {
			t.Fatalf("Process() = %v, %v", failed, err)
		}
	}
	firstWrites := obs.writes
	again := slices.Clone(recs)
	slices.Reverse(again)
	if failed, err := a.Process(context.Background(), again); err != nil || len(failed) > 0 {
		t.Fatalf("Process(again) = %v, %v", failed, err)
	}
	if obs.writes != firstWrites || obs.duplicates == 0 || obs.applied != 2*len(recs) {
		t.Errorf("after redelivery: %d writes (want %d), %d duplicates, %d applied of %d", obs.writes, firstWrites, obs.duplicates, obs.applied, 2*len(recs))
	}
	checkSnapshots(t, newStore(t, f, at), at, want)
}

// checkSnapshots compares every window's snapshots with want (entity/limit
// → millitokens; zero: a snapshot of zero, or none).
func checkSnapshots(t *testing.T, s *dynamo.Store, at time.Time, want map[string]int64) {
	t.Helper()
	for _, w := range usage.Windows {
		got := map[string]int64{}
		for _, e := range []string{"a", "b", "c", "d", "k1", "proj"} {
			snaps, err := usage.Of(s).Usage(context.Background(), "", e, "api", w, at.Add(-time.Minute))
			if err != nil {
				t.Fatalf("Usage(%s, %s) = %v", e, w, err)
			}
			for _, sn := range snaps {
				if !sn.Start.Equal(w.Start(at)) || sn.Entity != e || sn.Resource != "api" {
					t.Errorf("Usage(%s, %s) = snapshot %+v, want one of %v, entity %s", e, w, sn, w.Start(at), e)
				}
				for l, v := range sn.Limits {
					got[e+"/"+l] += v
				}
			}
		}
		maps.DeleteFunc(got, func(_ string, v int64) bool { return v == 0 })
		if !reflect.DeepEqual(got, nonZero(want)) {
			t.Errorf("%s snapshots = %v, want %v", w, got, want)
		}
	}
}

func nonZero(m map[string]int64) map[string]int64 {
	out := maps.Clone(m)
	maps.DeleteFunc(out, func(_ string, v int64) bool { return v == 0 })
	return out
}

// failing is a Writer that fails the records named, and names them (in
// reverse order when reverse is set).
type failing struct {
	fail    map[string]bool
	reverse bool
	got     [][]usage.Entry
}

func (f *failing) ApplyUsage(_ context.Context, recs []usage.Entry) (usage.Report, error) {
	f.got = append(f.got, recs)
	var rep usage.Report
	for _, r := range recs {
		if f.fail[r.ID] {
			rep.Failed = append(rep.Failed, r.ID)
		} else {
			rep.Applied++
		}
	}
	if f.reverse {
		slices.Reverse(rep.Failed)
	}
	if len(rep.Failed) > 0 {
		return rep, errors.New("throttled")
	}
	return rep, nil
}

// broken is a Writer that fails without naming records.
type broken struct{}

func (broken) ApplyUsage(context.Context, []usage.Entry) (usage.Report, error) {
	return usage.Report{Applied: 1}, errors.New("no table")
}

func TestProcessReportsFailed(t *testing.T) {
	recs := []usage.Record{
		{ID: "1", Name: usage.Insert, At: at, New: bucket("acme", "api", "0", map[string]string{"rps": "1000"})},
		{ID: "2", Name: usage.Insert, At: at, New: bucket("beta", "api", "0", map[string]string{"rps": "1000"})},
		{ID: "3", Name: usage.Insert, At: at, New: map[string]types.AttributeValue{"PK": s("ndefault/ENTITY#x"), "SK": s("#META")}},
	}
	recs = append(recs, usage.Record{ID: "0", Name: usage.Insert, At: at, New: bucket("zeta", "api", "0", map[string]string{"rps": "1000"})})
	w := &failing{fail: map[string]bool{"2": true, "0": true}, reverse: true}
	obs := &counts{}
	failed, err := usage.NewAggregator(w, usage.WithObserver(obs)).Process(context.Background(), recs)
	if !reflect.DeepEqual(failed, []string{"2", "0"}) || err == nil {
		t.Errorf("Process() = %v, %v, want [2 0] (in the records' order) and an error", failed, err)
	}
	if obs.applied != 2 || obs.failed != 2 {
		t.Errorf("observed %d applied, %d failed, want 2, 2", obs.applied, obs.failed)
	}
	if got := w.got[0]; len(got) != 4 || len(got[0].Usage) != 1 || got[0].Usage[0].Millitokens != 1000 || len(got[2].Usage) != 0 {
		t.Errorf("ApplyUsage got %+v, want three records, the entity's without usage", got)
	}
	failed, err = usage.NewAggregator(broken{}).Process(context.Background(), recs)
	if len(failed) != 4 || err == nil {
		t.Errorf("Process(broken writer) = %v, %v, want every record failed", failed, err)
	}
	if failed, err := usage.NewAggregator(w).Process(context.Background(), recs[:1]); failed != nil || err != nil {
		t.Errorf("Process(one good record) = %v, %v, want nothing failed", failed, err)
	}
}
