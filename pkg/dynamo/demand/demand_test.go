package demand_test

import (
	"errors"
	"math"
	"testing"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo/demand"
	"github.com/dynalimit/dynalimit/pkg/dynamo/item"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

var k = cascade.Key{Namespace: "ns", Entity: "e", Resource: "r"}

func image(consumed int64) *item.Image {
	return &item.Image{Exists: true, ShardCount: 1, Limits: map[string]item.LimitImage{item.LimitPrefix("l"): {Consumed: consumed}}}
}

// write is one write of this replica that debited own and returned the
// image with the counter at consumed, at now.
func write(t *demand.Table, own, consumed, now int64) {
	t.Saw("pk", "ns", k, image(consumed), now)
	p := &cascade.Plan{Debits: []cascade.Debit{{Key: k, Limit: "l", Amount: tokenbucket.Millitokens(own), Op: cascade.Consume}}}
	t.Debited(p, &cascade.Decision{Admitted: true, Statuses: []cascade.Status{{OK: true}}}, nil, now)
}

func part(t *demand.Table) (float64, bool) {
	return t.Part("ns", &cascade.Debit{Key: cascade.Key{Entity: "e", Resource: "r"}, Limit: "l"})
}

// TestPart: a replica that debits one of every four tokens the fleet
// consumes has a part of a quarter, known once a second of images is seen;
// its first write's debit is in the baseline and not counted.
func TestPart(t *testing.T) {
	tb := demand.New()
	consumed := int64(0)
	for ms := int64(0); ms <= 2000; ms += 100 {
		consumed += 4000
		write(tb, 1000, consumed, ms)
		if got, known := part(tb); known != (ms >= demand.HistoryMs) {
			t.Fatalf("at %d ms: known %v (%.3f)", ms, known, got)
		}
	}
	if got, _ := part(tb); math.Abs(got-0.25) > 0.01 {
		t.Errorf("part %.3f, want 0.25", got)
	}
}

// TestPartHolds: while nothing is seen the part stays; a lump of the
// fleet's consumption seen with one debit of this replica's counts as
// that debit's part of it.
func TestPartHolds(t *testing.T) {
	tb := demand.New()
	write(tb, 1000, 1000, 0)
	write(tb, 1000, 10000, 1500) // the fleet consumed 9 tokens, this replica 1
	before, known := part(tb)
	if !known || math.Abs(before-1.0/9) > 1e-9 {
		t.Fatalf("part %.4f (known %v), want 1/9", before, known)
	}
	write(tb, 0, 10000, 60000) // a minute later: nothing consumed
	if got, _ := part(tb); math.Abs(got-before) > 1e-9 {
		t.Errorf("part %.4f after a quiet minute, want %.4f still", got, before)
	}
}

// TestNotCounted: failed plans, refusals, contended statuses, refunds and
// a counter that went down count nothing.
func TestNotCounted(t *testing.T) {
	tb := demand.New()
	write(tb, 1000, 1000, 0)
	write(tb, 1000, 2000, 1000)
	p := &cascade.Plan{Debits: []cascade.Debit{{Key: k, Limit: "l", Amount: 1000, Op: cascade.Consume}}}
	tb.Debited(p, &cascade.Decision{Admitted: true, Statuses: []cascade.Status{{OK: true}}}, errors.New("unanswered"), 1000)
	tb.Debited(p, &cascade.Decision{Statuses: []cascade.Status{{}}}, nil, 1000)
	tb.Debited(p, &cascade.Decision{Admitted: true, Statuses: []cascade.Status{{OK: true, Contended: true}}}, nil, 1000)
	p.Debits[0].Op = cascade.Refund
	tb.Debited(p, &cascade.Decision{Admitted: true, Statuses: []cascade.Status{{OK: true}}}, nil, 1000)
	tb.Saw("pk", "ns", k, image(500), 1000)
	if got, _ := part(tb); got != 1 {
		t.Errorf("part %.3f, want 1 (one token debited of one consumed)", got)
	}
	if _, known := demand.New().Part("ns", &p.Debits[0]); known {
		t.Error("an empty table knows a part")
	}
}
