package aggregator_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/internal/aggregator"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
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

func use(rec, e, r, limit string, mt int64) aggregator.Usage {
	return aggregator.Usage{Record: rec, At: at, Usage: dynamo.Usage{Namespace: "default", Entity: e, Resource: r, Limit: limit, Millitokens: mt}}
}

func TestDeltas(t *testing.T) {
	entityItem := map[string]types.AttributeValue{"PK": s("ndefault/ENTITY#acme"), "SK": s("#META"), "b_x_tc": n("5")}
	tests := []struct {
		name string
		recs []aggregator.Record
		want []aggregator.Usage
	}{
		{"new item counts its first consumption",
			[]aggregator.Record{{ID: "1", Name: aggregator.Insert, At: at, New: bucket("acme", "api", "0", map[string]string{"rps": "3000"})}},
			[]aggregator.Usage{use("1", "acme", "api", "rps", 3000)}},
		{"modify counts new less old, per limit",
			[]aggregator.Record{{ID: "2", Name: aggregator.Modify, At: at,
				Old: bucket("acme", "api", "0", map[string]string{"rps": "3000", "day": "3000"}),
				New: bucket("acme", "api", "0", map[string]string{"rps": "5000", "day": "4000"})}},
			[]aggregator.Usage{use("2", "acme", "api", "day", 1000), use("2", "acme", "api", "rps", 2000)}},
		{"a limit new to the item counts from zero",
			[]aggregator.Record{{ID: "3", Name: aggregator.Modify, At: at,
				Old: bucket("acme", "api", "0", map[string]string{"rps": "3000"}),
				New: bucket("acme", "api", "0", map[string]string{"rps": "3000", "day": "7000"})}},
			[]aggregator.Usage{use("3", "acme", "api", "day", 7000)}},
		{"a give-back or refund is negative and cancels its consume",
			[]aggregator.Record{
				{ID: "4", Name: aggregator.Modify, At: at, Old: bucket("acme", "api", "0", map[string]string{"rps": "1000"}), New: bucket("acme", "api", "0", map[string]string{"rps": "3000"})},
				{ID: "5", Name: aggregator.Modify, At: at, Old: bucket("acme", "api", "0", map[string]string{"rps": "3000"}), New: bucket("acme", "api", "0", map[string]string{"rps": "1000"})}},
			[]aggregator.Usage{use("4", "acme", "api", "rps", 2000), use("5", "acme", "api", "rps", -2000)}},
		{"every shard is a record of the same bucket",
			[]aggregator.Record{
				{ID: "6", Name: aggregator.Modify, At: at, Old: bucket("acme", "api", "0", map[string]string{"rps": "0"}), New: bucket("acme", "api", "0", map[string]string{"rps": "1000"})},
				{ID: "7", Name: aggregator.Insert, At: at, New: bucket("acme", "api", "1", map[string]string{"rps": "2000"})}},
			[]aggregator.Usage{use("6", "acme", "api", "rps", 1000), use("7", "acme", "api", "rps", 2000)}},
		{"a hierarchical branch counts for its entity",
			[]aggregator.Record{{ID: "8", Name: aggregator.Insert, At: at, New: bucket("acme#route=%2Fv1", "api", "0", map[string]string{"rps": "1000"})}},
			[]aggregator.Usage{use("8", "acme", "api", "rps", 1000)}},
		{"unchanged counters, removals and other items count nothing",
			[]aggregator.Record{
				{ID: "9", Name: aggregator.Modify, At: at, Old: bucket("acme", "api", "0", map[string]string{"rps": "1000"}), New: bucket("acme", "api", "0", map[string]string{"rps": "1000"})},
				{ID: "10", Name: aggregator.Remove, At: at, Old: bucket("acme", "api", "0", map[string]string{"rps": "1000"})},
				{ID: "11", Name: aggregator.Insert, At: at, New: entityItem},
				{ID: "12", Name: aggregator.Insert, At: at}},
			nil},
		{"a counter that is not a number counts nothing",
			[]aggregator.Record{{ID: "13", Name: aggregator.Modify, At: at,
				Old: map[string]types.AttributeValue{"PK": s("ndefault/BUCKET#a#r#0"), "b_rps_tc": s("x")},
				New: map[string]types.AttributeValue{"PK": s("ndefault/BUCKET#a#r#0"), "b_rps_tc": n("5"), "b_day_tc": s("5")}}},
			nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := aggregator.Deltas(tt.recs); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Deltas() = %+v, want %+v", got, tt.want)
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
		if got := aggregator.Windows(tt.at); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Windows(%v) = %v, want %v", tt.at, got, tt.want)
		}
	}
}

// FuzzDeltas: no image makes Deltas panic, and each usage is of a bucket
// item and not zero.
func FuzzDeltas(f *testing.F) {
	f.Add("ndefault/BUCKET#a#r#0", "b_rps_tc", "5", "b_rps_tc", "7", "a#b")
	f.Add("ndefault/ENTITY#a", "b_rps_tc", "5", "b_rps_tc", "-7", "")
	f.Add("n/BUCKET#", "b__tc", "9223372036854775807", "b__tc", "-9223372036854775808", "#")
	f.Add("ndefault/BUCKET#a#r#0", "b_tc", "x", "tc", "1e3", "a")
	f.Fuzz(func(t *testing.T, pk, oldName, oldVal, newName, newVal, entity string) {
		old := map[string]types.AttributeValue{"PK": s(pk), oldName: n(oldVal)}
		nw := map[string]types.AttributeValue{"PK": s(pk), newName: n(newVal), "entity": s(entity), oldName + "x": s(oldVal)}
		for _, name := range []string{aggregator.Insert, aggregator.Modify, aggregator.Remove} {
			recs := []aggregator.Record{
				{ID: "1", Name: name, Old: old, New: nw},
				{ID: "2", Name: name, Keys: map[string]types.AttributeValue{"PK": s(pk)}, Old: nw},
				{ID: "3", Name: name, New: old},
			}
			for _, u := range aggregator.Deltas(recs) {
				if u.Millitokens == 0 {
					t.Fatalf("Deltas() = usage of zero: %+v", u)
				}
				if name == aggregator.Remove {
					t.Fatalf("Deltas() of a REMOVE = %+v, want none", u)
				}
			}
		}
	})
}
