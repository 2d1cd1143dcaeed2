package usage_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/dynalimit/dynalimit/pkg/dynamo/usage"
)

func s(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
func n(v string) types.AttributeValue { return &types.AttributeValueMemberN{Value: v} }

// bucket is a bucket item's image: shard of entity e's resource r, with
// tc values by limit (the level is irrelevant to usage and set to 0).
func bucket(e, r string, shard string, tc map[string]string) map[string]types.AttributeValue {
	item := map[string]types.AttributeValue{
		"PK": s("ndefault/BUCKET#" + e + "#" + r + "#" + shard), "SK": s("#STATE"),
		"ns": s("default"), "entity": s(e), "resource": s(r), "shard_count": n("1"), "ttl": n("1800000000"),
	}
	for l, v := range tc {
		item["b_"+l+"_x"] = n("0")
		item["b_"+l+"_tc"] = n(v)
		item["b_"+l+"_l"] = s("10000/10000/1000")
	}
	return item
}

var at = time.Date(2026, 11, 26, 14, 30, 0, 0, time.UTC)

// delta is what one record consumed of one limit of one bucket, as the
// Aggregator hands it to its Writer.
type delta struct {
	Record string    // the record's ID
	At     time.Time // the record's time
	usage.Usage
}

// capture is a Writer that keeps what it was given.
type capture struct{ recs []usage.Entry }

func (c *capture) ApplyUsage(_ context.Context, recs []usage.Entry) (usage.Report, error) {
	c.recs = append(c.recs, recs...)
	return usage.Report{Applied: len(recs)}, nil
}

// deltas runs recs through an Aggregator and returns the usage its Writer
// got, in record order and, within a record, by limit.
func deltas(t testing.TB, recs []usage.Record) []delta {
	t.Helper()
	var c capture
	if _, err := usage.NewAggregator(&c).Process(context.Background(), recs); err != nil {
		t.Fatalf("Process() = %v", err)
	}
	var out []delta
	for _, r := range c.recs {
		for _, u := range r.Usage {
			out = append(out, delta{Record: r.ID, At: r.At, Usage: u})
		}
	}
	return out
}

// windowKeys is the keys of the snapshots a record at t adds to.
func windowKeys(t time.Time) []string {
	keys := make([]string, len(usage.Windows))
	for i, w := range usage.Windows {
		keys[i] = w.Key(t)
	}
	return keys
}

func use(rec, e, r, limit string, mt int64) delta {
	return delta{Record: rec, At: at, Usage: usage.Usage{Namespace: "default", Entity: e, Resource: r, Limit: limit, Millitokens: mt}}
}

func TestDeltas(t *testing.T) {
	entityItem := map[string]types.AttributeValue{"PK": s("ndefault/ENTITY#acme"), "SK": s("#META"), "b_x_tc": n("5")}
	tests := []struct {
		name string
		recs []usage.Record
		want []delta
	}{
		{"new item counts its first consumption",
			[]usage.Record{{ID: "1", Name: usage.Insert, At: at, New: bucket("acme", "api", "0", map[string]string{"rps": "3000"})}},
			[]delta{use("1", "acme", "api", "rps", 3000)}},
		{"modify counts new less old, per limit",
			[]usage.Record{{ID: "2", Name: usage.Modify, At: at,
				Old: bucket("acme", "api", "0", map[string]string{"rps": "3000", "day": "3000"}),
				New: bucket("acme", "api", "0", map[string]string{"rps": "5000", "day": "4000"})}},
			[]delta{use("2", "acme", "api", "day", 1000), use("2", "acme", "api", "rps", 2000)}},
		{"a limit new to the item counts from zero",
			[]usage.Record{{ID: "3", Name: usage.Modify, At: at,
				Old: bucket("acme", "api", "0", map[string]string{"rps": "3000"}),
				New: bucket("acme", "api", "0", map[string]string{"rps": "3000", "day": "7000"})}},
			[]delta{use("3", "acme", "api", "day", 7000)}},
		{"a give-back or refund is negative and cancels its consume",
			[]usage.Record{
				{ID: "4", Name: usage.Modify, At: at, Old: bucket("acme", "api", "0", map[string]string{"rps": "1000"}), New: bucket("acme", "api", "0", map[string]string{"rps": "3000"})},
				{ID: "5", Name: usage.Modify, At: at, Old: bucket("acme", "api", "0", map[string]string{"rps": "3000"}), New: bucket("acme", "api", "0", map[string]string{"rps": "1000"})}},
			[]delta{use("4", "acme", "api", "rps", 2000), use("5", "acme", "api", "rps", -2000)}},
		{"every shard is a record of the same bucket",
			[]usage.Record{
				{ID: "6", Name: usage.Modify, At: at, Old: bucket("acme", "api", "0", map[string]string{"rps": "0"}), New: bucket("acme", "api", "0", map[string]string{"rps": "1000"})},
				{ID: "7", Name: usage.Insert, At: at, New: bucket("acme", "api", "1", map[string]string{"rps": "2000"})}},
			[]delta{use("6", "acme", "api", "rps", 1000), use("7", "acme", "api", "rps", 2000)}},
		{"a hierarchical branch counts for its entity",
			[]usage.Record{{ID: "8", Name: usage.Insert, At: at, New: bucket("acme#route=%2Fv1", "api", "0", map[string]string{"rps": "1000"})}},
			[]delta{use("8", "acme", "api", "rps", 1000)}},
		{"unchanged counters, removals and other items count nothing",
			[]usage.Record{
				{ID: "9", Name: usage.Modify, At: at, Old: bucket("acme", "api", "0", map[string]string{"rps": "1000"}), New: bucket("acme", "api", "0", map[string]string{"rps": "1000"})},
				{ID: "10", Name: usage.Remove, At: at, Old: bucket("acme", "api", "0", map[string]string{"rps": "1000"})},
				{ID: "11", Name: usage.Insert, At: at, New: entityItem},
				{ID: "12", Name: usage.Insert, At: at}},
			nil},
		{"a counter that is not a number counts nothing",
			[]usage.Record{{ID: "13", Name: usage.Modify, At: at,
				Old: map[string]types.AttributeValue{"PK": s("ndefault/BUCKET#a#r#0"), "b_rps_tc": s("x")},
				New: map[string]types.AttributeValue{"PK": s("ndefault/BUCKET#a#r#0"), "b_rps_tc": n("5"), "b_day_tc": s("5")}}},
			nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := deltas(t, tt.recs); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("usage given to the Writer = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestWindows(t *testing.T) {
	tests := []struct {
		at   time.Time
		want []string
	}{
		{at, []string{"h2026112614", "d20261126", "m202611"}},
		{time.Date(2026, 11, 26, 23, 59, 59, 999e6, time.UTC), []string{"h2026112623", "d20261126", "m202611"}},
		{time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC), []string{"h2027010100", "d20270101", "m202701"}},
		// Event times are placed in UTC windows whatever their zone.
		{time.Date(2026, 11, 27, 1, 0, 0, 0, time.FixedZone("CET", 3600)), []string{"h2026112700", "d20261127", "m202611"}},
	}
	for _, tt := range tests {
		if got := windowKeys(tt.at); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("the window keys of %v = %v, want %v", tt.at, got, tt.want)
		}
	}
}

// FuzzDeltas: no image makes Process panic, and each usage is of a bucket
// item and not zero.
func FuzzDeltas(f *testing.F) {
	f.Add("ndefault/BUCKET#a#r#0", "b_rps_tc", "5", "b_rps_tc", "7", "a#b")
	f.Add("ndefault/ENTITY#a", "b_rps_tc", "5", "b_rps_tc", "-7", "")
	f.Add("n/BUCKET#", "b__tc", "9223372036854775807", "b__tc", "-9223372036854775808", "#")
	f.Add("ndefault/BUCKET#a#r#0", "b_tc", "x", "tc", "1e3", "a")
	f.Fuzz(func(t *testing.T, pk, oldName, oldVal, newName, newVal, entity string) {
		old := map[string]types.AttributeValue{"PK": s(pk), oldName: n(oldVal)}
		nw := map[string]types.AttributeValue{"PK": s(pk), newName: n(newVal), "entity": s(entity), oldName + "x": s(oldVal)}
		for _, name := range []string{usage.Insert, usage.Modify, usage.Remove} {
			recs := []usage.Record{
				{ID: "1", Name: name, Old: old, New: nw},
				{ID: "2", Name: name, Keys: map[string]types.AttributeValue{"PK": s(pk)}, Old: nw},
				{ID: "3", Name: name, New: old},
			}
			for _, u := range deltas(t, recs) {
				if u.Millitokens == 0 {
					t.Fatalf("usage given to the Writer = usage of zero: %+v", u)
				}
				if name == usage.Remove {
					t.Fatalf("usage given to the Writer of a REMOVE = %+v, want none", u)
				}
			}
		}
	})
}
