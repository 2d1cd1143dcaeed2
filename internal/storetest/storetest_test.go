package storetest

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestRunRef(t *testing.T) {
	Run(t, func(t *testing.T, c *Clock) Store { return NewReference(c.Now) })
}

func TestRunConcurrencyRef(t *testing.T) {
	RunConcurrency(t, func(t *testing.T) []Store { return []Store{NewReference(time.Now)} })
}

func TestRunSettleRef(t *testing.T) {
	RunSettle(t, func(t *testing.T, c *Clock) Settler { return NewReference(c.Now) })
}

func TestRunSettleConcurrencyRef(t *testing.T) {
	RunSettleConcurrency(t, func(t *testing.T) []Settler { return []Settler{NewReference(time.Now)} })
}

// forgetful drops every bucket after each call.
type forgetful struct{ now func() time.Time }

func (f forgetful) Acquire(ctx context.Context, p *cascade.Plan) (cascade.Decision, error) {
	return NewReference(f.now).Acquire(ctx, p)
}

// collapsing keys buckets by entity alone.
type collapsing struct{ s *Reference }

func (c collapsing) Acquire(ctx context.Context, p *cascade.Plan) (cascade.Decision, error) {
	q := &cascade.Plan{Debits: append([]cascade.Debit(nil), p.Debits...)}
	for i := range q.Debits {
		q.Debits[i].Key = cascade.Key{Entity: q.Debits[i].Key.Entity}
		q.Debits[i].Limit = ""
	}
	return c.s.Acquire(ctx, q)
}

// greedy debits every admitted debit even when the plan is refused.
type greedy struct{ s *Reference }

func (g greedy) Acquire(ctx context.Context, p *cascade.Plan) (cascade.Decision, error) {
	dec, err := g.s.Acquire(ctx, p)
	if err != nil || dec.Admitted {
		return dec, err
	}
	for i, d := range p.Debits {
		if dec.Statuses[i].OK && d.Op == cascade.Consume {
			one := &cascade.Plan{Debits: []cascade.Debit{d}}
			if _, err := g.s.Acquire(ctx, one); err != nil {
				return dec, err
			}
		}
	}
	return dec, nil
}

func TestSuiteCatchesBrokenStores(t *testing.T) {
	steps := func(name string) []step {
		for _, bt := range behaviours() {
			if bt.name == name {
				return bt.steps
			}
		}
		t.Fatalf("no behaviour %q", name)
		return nil
	}
	tests := []struct {
		name      string
		store     func(c *Clock) Store
		behaviour string
	}{
		{"forgetful", func(c *Clock) Store { return forgetful{c.Now} }, "consume_to_empty_then_refused"},
		{"collapsing/named", func(c *Clock) Store { return collapsing{NewReference(c.Now)} }, "named_limits_share_item"},
		{"greedy", func(c *Clock) Store { return greedy{NewReference(c.Now)} }, "all_or_nothing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewClock(Epoch)
			if err := checkSteps(tt.store(c), c, steps(tt.behaviour)); err == nil {
				t.Errorf("checkSteps(%s, %s) = nil, want a failure", tt.name, tt.behaviour)
			}
		})
	}
	c := NewClock(Epoch)
	if err := checkDistinctKeys(collapsing{NewReference(c.Now)}); err == nil {
		t.Errorf("checkDistinctKeys(collapsing) = nil, want a failure")
	}
}

func TestClock(t *testing.T) {
	c := NewClock(Epoch)
	c.Advance(1500 * time.Millisecond)
	if got, want := c.Now(), Epoch.Add(1500*time.Millisecond); !got.Equal(want) {
		t.Errorf("Advance(1.5s); Now() = %v, want %v", got, want)
	}
	c.Set(Epoch.Add(-time.Second))
	if got, want := c.Now(), Epoch.Add(-time.Second); !got.Equal(want) {
		t.Errorf("Set(Epoch-1s); Now() = %v, want %v", got, want)
	}
}

func TestIdealAdmits(t *testing.T) {
	busy := make([]int64, 2000)
	for i := range busy {
		busy[i] = 1000
	}
	stalled := make([]int64, 2000)
	stalled[0], stalled[1000] = 1000, 1000
	tests := []struct {
		name  string
		calls []int64
		want  int64
	}{
		{"busy every millisecond", busy, 100 + 1999*500/1000},
		{"stalled between two bursts", stalled, 100 + 100},
		{"no calls", make([]int64, 10), 0},
		{"fewer calls than tokens", []int64{7, 0, 3}, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := idealAdmits(tt.calls); got != tt.want {
				t.Errorf("idealAdmits(%s) = %d, want %d", tt.name, got, tt.want)
			}
		})
	}
}

// TestReferenceForget: forgetting a drained bucket admits what it lacked of
// full once more, and nothing else: the bound on what an eviction
// over-admits. Another bucket limit of the same key keeps its level.
func TestReferenceForget(t *testing.T) {
	c := NewClock(Epoch)
	s := NewReference(c.Now)
	hour := tokenbucket.Limit{Capacity: 5000, RefillAmount: 1000, RefillPeriod: time.Hour}
	k := cascade.Key{Namespace: "ns", Entity: "e", Resource: "r"}
	take := func(limit string) bool {
		t.Helper()
		dec, err := s.Acquire(context.Background(), &cascade.Plan{Debits: []cascade.Debit{{Key: k, Limit: limit, Bucket: hour, Amount: 1000}}})
		if err != nil {
			t.Fatalf("Acquire(%s) error = %v", limit, err)
		}
		return dec.Admitted
	}
	admitted := func(limit string, n int) int {
		got := 0
		for range n {
			if take(limit) {
				got++
			}
		}
		return got
	}
	if got := admitted("a", 3); got != 3 {
		t.Fatalf("admitted(a) before = %d, want 3", got)
	}
	admitted("b", 5)
	s.Forget(k, "a") // a lacked 3 tokens of full
	tests := []struct {
		limit string
		want  int
	}{
		{"a", 5}, // its 2 left plus the 3 forgiven
		{"b", 0}, // untouched
		{"a", 0}, // forgiven once
	}
	for _, tt := range tests {
		if got := admitted(tt.limit, 10); got != tt.want {
			t.Errorf("after Forget(a), admitted(%s) of 10 = %d, want %d", tt.limit, got, tt.want)
		}
	}
	if _, ok := s.Tokens(func(_ cascade.Key, limit string) bool { return limit == "a" }); !ok {
		t.Errorf("Tokens(a) after it was used again: not stored, want stored")
	}
}
