package dynamo

import (
	"testing"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// Equivalent mutants, read by internal/mutants (make mutation):
//
// mutant: CONDITIONALS_BOUNDARY lane.go `n <= 1` pickShard: at n = 1, rand.IntN(1) is 0 too (and a shard count is never below 1).
// mutant: CONDITIONALS_BOUNDARY lane.go `n > 1` plan: at n = 1, mulSat(a, 1) is a.
// mutant: CONDITIONALS_BOUNDARY lane.go `pt.n <= 1` await: at n = 1, pt.tried+1 >= pt.n holds too, so the part returns either way.
// mutant: CONDITIONALS_NEGATION lane.go `(pt.scale == 0 || ctx.Err() == nil)` await: a give-back that await does not queue again is tried again by its caller (compensate, tryGiveBacks) within the same budget, and a charge's budget outlasts costDeadline, so either way a part is queued again exactly while costDeadline allows; a part without cost is contended here only when a merge bounced it, and past its budget it is refused as contended either way (counted as queued or as raced).

// TestPickShard: an item of one shard is always shard 0; one of n shards
// is any shard below n.
func TestPickShard(t *testing.T) {
	s := &Store{}
	for range 100 {
		if got := s.pickShard(1); got != 0 {
			t.Fatalf("pickShard(1) = %d, want 0", got)
		}
	}
	seen := map[int]int{}
	for range 400 {
		got := s.pickShard(4)
		if got < 0 || got >= 4 {
			t.Fatalf("pickShard(4) = %d, want within [0, 4)", got)
		}
		seen[got]++
	}
	if len(seen) != 4 {
		t.Errorf("pickShard(4) over 400 draws = %v, want every shard of 4", seen)
	}
}

// TestPartPlan: a part's amounts count once per shard of its item, except
// a compensation's (scale set), whose amounts are already multiplied.
func TestPartPlan(t *testing.T) {
	d := []cascade.Debit{{Amount: 1000}, {Amount: 250}}
	tests := []struct {
		name  string
		scale int
		n     int
		want  []tokenbucket.Millitokens
	}{
		{"one shard", 0, 1, []tokenbucket.Millitokens{1000, 250}},
		{"four shards", 0, 4, []tokenbucket.Millitokens{4000, 1000}},
		{"a compensation on four shards", 4, 4, []tokenbucket.Millitokens{1000, 250}},
		{"a compensation of scale 1", 1, 2, []tokenbucket.Millitokens{1000, 250}},
	}
	for _, tt := range tests {
		pt := &part{debits: d, scale: tt.scale}
		if tt.scale > 0 {
			pt.kind = giveBackPart
		}
		q := pt.plan(tt.n)
		for i, want := range tt.want {
			if got := q.Debits[i].Amount; got != want {
				t.Errorf("%s: plan(%d) debit %d amount = %d, want %d", tt.name, tt.n, i, got, want)
			}
		}
		if d[0].Amount != 1000 {
			t.Fatalf("%s: plan(%d) changed the part's own debits", tt.name, tt.n)
		}
	}
}

// TestCompensation: what an admitted part gives back is each consume that
// took something (OK, amount above zero), as an advisory refund in the
// units the part was decided in; nothing else, and nil when that is nothing.
func TestCompensation(t *testing.T) {
	ok, no := cascade.Status{OK: true}, cascade.Status{}
	tests := []struct {
		name     string
		debits   []cascade.Debit
		statuses []cascade.Status
		n, scale int
		want     []tokenbucket.Millitokens // the refunds' amounts; nil: no compensation
	}{
		{"a consume", []cascade.Debit{{Op: cascade.Consume, Amount: 1000}}, []cascade.Status{ok}, 1, 0, []tokenbucket.Millitokens{1000}},
		{"a consume on four shards", []cascade.Debit{{Op: cascade.Consume, Amount: 1000}}, []cascade.Status{ok}, 4, 0, []tokenbucket.Millitokens{4000}},
		{"a compensation's consume", []cascade.Debit{{Op: cascade.Consume, Amount: 1000}}, []cascade.Status{ok}, 4, 4, []tokenbucket.Millitokens{1000}},
		{"a consume of nothing", []cascade.Debit{{Op: cascade.Consume, Amount: 0}}, []cascade.Status{ok}, 1, 0, nil},
		{"a consume refused", []cascade.Debit{{Op: cascade.Consume, Amount: 1000}}, []cascade.Status{no}, 1, 0, nil},
		{"a check and a charge", []cascade.Debit{{Op: cascade.Check, Amount: 1000}, {Op: cascade.Charge, Amount: 1000}}, []cascade.Status{ok, ok}, 1, 0, nil},
		{"a consume after a refused one", []cascade.Debit{{Op: cascade.Consume, Amount: 1000}, {Op: cascade.Consume, Amount: 500}}, []cascade.Status{no, ok}, 2, 0, []tokenbucket.Millitokens{1000}},
	}
	for _, tt := range tests {
		pt := &part{debits: tt.debits, dec: cascade.Decision{Statuses: tt.statuses}, n: tt.n, scale: tt.scale, shard: 1}
		if tt.scale > 0 {
			pt.kind = giveBackPart
		}
		c := pt.compensation()
		if tt.want == nil {
			if c != nil {
				t.Errorf("%s: compensation() = %+v, want nil", tt.name, c.debits)
			}
			continue
		}
		if c == nil || len(c.debits) != len(tt.want) {
			t.Errorf("%s: compensation() = %v, want refunds of %v", tt.name, c, tt.want)
			continue
		}
		if c.of != pt || c.shard != 1 || c.scale != tt.n {
			t.Errorf("%s: compensation() of %p, shard %d, scale %d, want of %p, shard 1, scale %d", tt.name, c.of, c.shard, c.scale, pt, tt.n)
		}
		for i, d := range c.debits {
			if d.Op != cascade.Refund || d.Role != cascade.Advisory || d.Amount != tt.want[i] {
				t.Errorf("%s: refund %d = %+v, want an advisory refund of %d", tt.name, i, d, tt.want[i])
			}
		}
	}
}

// TestRestored: a compensation that landed reports, for each limit of the
// part it gave back for, what that limit holds after it; one that failed,
// or has no decision, leaves the plan's decision as it is.
func TestRestored(t *testing.T) {
	of := &part{debits: []cascade.Debit{{Limit: "x"}, {Limit: "y"}}, idx: []int{2, 0}}
	landed := cascade.Decision{Statuses: []cascade.Status{{Remaining: 7, ResetAfter: 3}}}
	tests := []struct {
		name string
		c    *part
		want []tokenbucket.Millitokens
	}{
		{"landed", &part{of: of, debits: []cascade.Debit{{Limit: "y"}}, dec: landed}, []tokenbucket.Millitokens{7, 1, 1}},
		{"failed", &part{of: of, debits: []cascade.Debit{{Limit: "y"}}, dec: landed, err: errContended}, []tokenbucket.Millitokens{1, 1, 1}},
		{"no decision", &part{of: of, debits: []cascade.Debit{{Limit: "y"}}}, []tokenbucket.Millitokens{1, 1, 1}},
	}
	for _, tt := range tests {
		dec := cascade.Decision{Statuses: []cascade.Status{{Remaining: 1}, {Remaining: 1}, {Remaining: 1}}}
		tt.c.restored(&dec)
		for i, want := range tt.want {
			if got := dec.Statuses[i].Remaining; got != want {
				t.Errorf("%s: restored() status %d remaining = %d, want %d", tt.name, i, got, want)
			}
		}
	}
}

// TestHasCost: a part has cost when one of its debits charges or refunds.
func TestHasCost(t *testing.T) {
	tests := []struct {
		ops  []cascade.Op
		want bool
	}{
		{[]cascade.Op{cascade.Consume, cascade.Check}, false},
		{[]cascade.Op{cascade.Consume, cascade.Charge}, true},
		{[]cascade.Op{cascade.Refund}, true},
		{[]cascade.Op{cascade.Check, cascade.Refund, cascade.Consume}, true},
		{nil, false},
	}
	for _, tt := range tests {
		pt := &part{}
		for _, op := range tt.ops {
			pt.debits = append(pt.debits, cascade.Debit{Op: op})
		}
		if got := pt.hasCost(); got != tt.want {
			t.Errorf("hasCost(%v) = %v, want %v", tt.ops, got, tt.want)
		}
	}
}
