package cascade_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

type (
	Millitokens = tokenbucket.Millitokens
	State       = tokenbucket.State
)

const (
	tok = tokenbucket.PerToken
	ms  = time.Millisecond
	t0  = int64(1_700_000_000_000)
)

// Limits chosen so that every expectation is worked out by hand:
// three refills 3 mt/ms (3 tokens per second), one 1 mt/ms, slow 1 mt per 20 ms.
var (
	three = tokenbucket.Limit{Capacity: 3000, RefillAmount: 3000, RefillPeriod: time.Second}
	one   = tokenbucket.Limit{Capacity: 1000, RefillAmount: 1000, RefillPeriod: time.Second}
	slow  = tokenbucket.Limit{Capacity: 3000, RefillAmount: 3000, RefillPeriod: time.Minute}
)

func d(op cascade.Op, l tokenbucket.Limit, n Millitokens) cascade.Debit {
	return cascade.Debit{Key: cascade.Key{Namespace: "default", Entity: "e", Resource: "r"}, Limit: "rpm", Bucket: l, Amount: n, Op: op}
}

// hold returns the level of a bucket of l holding tokens at t.
func hold(l tokenbucket.Limit, tokens Millitokens, t int64) State {
	x := tokenbucket.Mul(t, int64(l.RefillAmount)).Sub(tokenbucket.Mul(int64(tokens), l.RefillPeriod.Milliseconds()))
	return State{X: x}
}

// stored returns the levels of buckets a store holds in states.
func stored(states []State) []tokenbucket.Level {
	levels := make([]tokenbucket.Level, len(states))
	for i, s := range states {
		levels[i] = tokenbucket.Stored(s)
	}
	return levels
}

func statesOf(levels []tokenbucket.Level) []State {
	states := make([]State, len(levels))
	for i := range levels {
		states[i] = levels[i].State()
	}
	return states
}

func consume(l tokenbucket.Limit, n Millitokens) cascade.Debit { return d(cascade.Consume, l, n) }
func check(l tokenbucket.Limit) cascade.Debit                  { return d(cascade.Check, l, 0) }
func charge(l tokenbucket.Limit, n Millitokens) cascade.Debit  { return d(cascade.Charge, l, n) }
func refund(l tokenbucket.Limit, n Millitokens) cascade.Debit  { return d(cascade.Refund, l, n) }
func advisory(x cascade.Debit) cascade.Debit                   { x.Role = cascade.Advisory; return x }
func quota(x cascade.Debit) cascade.Debit                      { x.Role = cascade.Quota; return x }

func ok(rem Millitokens, reset time.Duration) cascade.Status {
	return cascade.Status{OK: true, Remaining: rem, ResetAfter: reset}
}

func no(rem Millitokens, retry, reset time.Duration) cascade.Status {
	return cascade.Status{Remaining: rem, RetryAfter: retry, ResetAfter: reset}
}

// Equivalent mutant, read by internal/mutants (make mutation): Admit only
// asks whether the quota count is zero, and counting down from zero never
// comes back to it, so "quotas--" answers every case below as "quotas++".
//
// mutant: INCREMENT_DECREMENT plan.go `quotas++` a count that only ever leaves zero tells the same whichever way it counts.
func TestAdmit(t *testing.T) {
	E, A, Q := cascade.Enforce, cascade.Advisory, cascade.Quota
	type r struct {
		role cascade.Role
		ok   bool
	}
	tests := []struct {
		name string
		in   []r
		want bool
	}{
		{"empty plan", nil, true},
		{"one enforce ok", []r{{E, true}}, true},
		{"one enforce refused", []r{{E, false}}, false},
		{"enforce all ok", []r{{E, true}, {E, true}, {E, true}}, true},
		{"enforce one refused", []r{{E, true}, {E, false}, {E, true}}, false},
		{"advisory refused alone", []r{{A, false}}, true},
		{"advisory refused, enforce ok", []r{{A, false}, {E, true}}, true},
		{"advisory ok, enforce refused", []r{{A, true}, {E, false}}, false},
		{"one quota refused", []r{{Q, false}}, false},
		{"one quota ok", []r{{Q, true}}, true},
		{"quotas: one of two ok", []r{{Q, false}, {Q, true}}, true},
		{"quotas: all refused", []r{{Q, false}, {Q, false}, {Q, false}}, false},
		{"quota ok, enforce refused", []r{{Q, true}, {E, false}}, false},
		{"quota refused, enforce ok", []r{{Q, false}, {E, true}}, false},
		{"quota refused twice, one ok, enforce ok", []r{{Q, false}, {E, true}, {Q, false}, {Q, true}}, true},
		{"quotas all refused, advisory ok", []r{{Q, false}, {A, true}}, false},
		{"advisory refused, quota ok, enforce ok", []r{{A, false}, {Q, true}, {E, true}}, true},
		{"unknown role never refuses", []r{{cascade.Role(9), false}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			debits := make([]cascade.Debit, len(tt.in))
			statuses := make([]cascade.Status, len(tt.in))
			var desc []string
			for i, x := range tt.in {
				debits[i].Role = x.role
				statuses[i].OK = x.ok
				desc = append(desc, fmt.Sprintf("%d:%t", x.role, x.ok))
			}
			if got := cascade.Admit(debits, statuses); got != tt.want {
				t.Errorf("Admit(%s) = %t, want %t", strings.Join(desc, " "), got, tt.want)
			}
		})
	}
}

func TestOpString(t *testing.T) {
	for op, want := range map[cascade.Op]string{
		cascade.Consume: "consume", cascade.Check: "check", cascade.Charge: "charge",
		cascade.Refund: "refund", cascade.Op(200): "unknown",
	} {
		if got := op.String(); got != want {
			t.Errorf("Op(%d).String() = %q, want %q", op, got, want)
		}
	}
}

func TestDecide(t *testing.T) {
	full3 := three.Full(t0)
	tests := []struct {
		name   string
		debits []cascade.Debit
		slot   []int
		states []State
		at     int64
		want   cascade.Decision
		after  []State
	}{
		{
			name:   "empty plan is admitted",
			debits: nil, slot: nil, states: nil, at: t0,
			want: cascade.Decision{Admitted: true, Statuses: []cascade.Status{}},
		},
		{
			name:   "one consume",
			debits: []cascade.Debit{consume(three, tok)},
			slot:   []int{0}, states: []State{full3}, at: t0,
			want:  cascade.Decision{Admitted: true, Statuses: []cascade.Status{ok(2000, 334*ms)}},
			after: []State{hold(three, 2000, t0)},
		},
		{
			name:   "refill is implicit in the clock",
			debits: []cascade.Debit{consume(three, tok)},
			slot:   []int{0}, states: []State{hold(three, 0, t0)}, at: t0 + 500,
			want:  cascade.Decision{Admitted: true, Statuses: []cascade.Status{ok(500, 834*ms)}},
			after: []State{hold(three, 500, t0+500)},
		},
		{
			name:   "all or nothing: the second bucket refuses, the first keeps its tokens",
			debits: []cascade.Debit{consume(three, tok), consume(one, tok)},
			slot:   []int{0, 1}, states: []State{full3, hold(one, 0, t0)}, at: t0,
			want:  cascade.Decision{Statuses: []cascade.Status{ok(3000, 0), no(0, 1000*ms, 1000*ms)}},
			after: []State{full3, hold(one, 0, t0)},
		},
		{
			name:   "a refused plan writes nothing, not even refill",
			debits: []cascade.Debit{consume(three, tok), consume(one, tok)},
			slot:   []int{0, 1}, states: []State{hold(three, 0, t0), hold(one, 0, t0)}, at: t0 + 400,
			// three holds 1200 and admits; one holds 400 of the 1000 it needs.
			want:  cascade.Decision{Statuses: []cascade.Status{ok(1200, 600*ms), no(400, 600*ms, 600*ms)}},
			after: []State{hold(three, 0, t0), hold(one, 0, t0)},
		},
		{
			name:   "two debits sharing a slot: the second sees the first",
			debits: []cascade.Debit{consume(three, 2*tok), consume(three, tok)},
			slot:   []int{0, 0}, states: []State{full3}, at: t0,
			want:  cascade.Decision{Admitted: true, Statuses: []cascade.Status{ok(0, 1000*ms), ok(0, 1000*ms)}},
			after: []State{hold(three, 0, t0)},
		},
		{
			name:   "two debits sharing a slot: the second is refused, nothing is debited",
			debits: []cascade.Debit{consume(three, 2*tok), consume(three, 2*tok)},
			slot:   []int{0, 0}, states: []State{full3}, at: t0,
			// A retry needs 4 tokens in a bucket that holds 3: as if uncapped, 1000 mt at 3 mt/ms.
			want:  cascade.Decision{Statuses: []cascade.Status{ok(3000, 0), no(3000, 334*ms, 0)}},
			after: []State{full3},
		},
		{
			name:   "shared slot: the first is refused, the second alone would fit",
			debits: []cascade.Debit{consume(three, 2*tok), consume(three, tok)},
			slot:   []int{0, 0}, states: []State{hold(three, 1500, t0)}, at: t0,
			// a retry must pass both: 3000 from 1500.
			want:  cascade.Decision{Statuses: []cascade.Status{no(1500, 500*ms, 500*ms), ok(1500, 500*ms)}},
			after: []State{hold(three, 1500, t0)},
		},
		{
			name:   "shared slot asking one millitoken more than the capacity",
			debits: []cascade.Debit{consume(three, 3*tok), consume(three, 1)},
			slot:   []int{0, 0}, states: []State{full3}, at: t0,
			want:  cascade.Decision{Statuses: []cascade.Status{ok(3000, 0), no(3000, 1*ms, 0)}},
			after: []State{full3},
		},
		{
			name:   "the same from a bucket full for long",
			debits: []cascade.Debit{consume(three, 3*tok), consume(three, 1)},
			slot:   []int{0, 0}, states: []State{hold(three, 9000, t0)}, at: t0,
			want:  cascade.Decision{Statuses: []cascade.Status{ok(3000, 0), no(3000, 1*ms, 0)}},
			after: []State{hold(three, 9000, t0)},
		},
		{
			name:   "order decides: refund first lets the consume pass",
			debits: []cascade.Debit{refund(three, tok), consume(three, 3*tok)},
			slot:   []int{0, 0}, states: []State{hold(three, 2000, t0)}, at: t0,
			want:  cascade.Decision{Admitted: true, Statuses: []cascade.Status{ok(0, 1000*ms), ok(0, 1000*ms)}},
			after: []State{hold(three, 0, t0)},
		},
		{
			name:   "order decides: refund after the consume comes too late",
			debits: []cascade.Debit{consume(three, 3*tok), refund(three, tok)},
			slot:   []int{0, 0}, states: []State{hold(three, 2000, t0)}, at: t0,
			// refused; the refund is applied anyway.
			want:  cascade.Decision{Statuses: []cascade.Status{no(3000, 0, 0), ok(3000, 0)}},
			after: []State{full3},
		},
		{
			name:   "charge applied even when the plan is refused",
			debits: []cascade.Debit{consume(one, tok), charge(three, 2*tok)},
			slot:   []int{0, 1}, states: []State{hold(one, 0, t0), full3}, at: t0,
			want: cascade.Decision{Statuses: []cascade.Status{
				no(0, 1000*ms, 1000*ms), ok(1000, 667*ms)}},
			after: []State{hold(one, 0, t0), hold(three, 1000, t0)},
		},
		{
			name:   "charge that fits is admitted",
			debits: []cascade.Debit{charge(three, 2*tok)},
			slot:   []int{0}, states: []State{hold(three, 2000, t0)}, at: t0,
			want:  cascade.Decision{Admitted: true, Statuses: []cascade.Status{ok(0, 1000*ms)}},
			after: []State{hold(three, 0, t0)},
		},
		{
			name:   "charge that does not fit is refused and lands in debt",
			debits: []cascade.Debit{charge(three, 2*tok)},
			slot:   []int{0}, states: []State{hold(three, 1, t0)}, at: t0,
			// −1999 mt: retry once 2000 mt are back, 3999 mt at 3 per second.
			want:  cascade.Decision{Statuses: []cascade.Status{no(-1999, 1333*ms, 1667*ms)}},
			after: []State{hold(three, -1999, t0)},
		},
		{
			name:   "charge on an empty bucket is refused and applied",
			debits: []cascade.Debit{charge(slow, tok)},
			slot:   []int{0}, states: []State{hold(slow, 0, t0)}, at: t0,
			// −1000 mt: retry once the charge's 1000 mt are back, 2000 mt at
			// 20 ms each.
			want:  cascade.Decision{Statuses: []cascade.Status{no(-1000, 40_000*ms, 80_000*ms)}},
			after: []State{hold(slow, -1000, t0)},
		},
		{
			name:   "advisory charge refused does not refuse the plan and is applied",
			debits: []cascade.Debit{advisory(charge(slow, tok)), consume(three, tok)},
			slot:   []int{0, 1}, states: []State{hold(slow, 0, t0), full3}, at: t0,
			want: cascade.Decision{Admitted: true, Statuses: []cascade.Status{
				no(-1000, 40_000*ms, 80_000*ms), ok(2000, 334*ms)}},
			after: []State{hold(slow, -1000, t0), hold(three, 2000, t0)},
		},
		{
			name:   "refund capped at capacity",
			debits: []cascade.Debit{refund(three, 10*tok)},
			slot:   []int{0}, states: []State{hold(three, 1000, t0)}, at: t0 + 100,
			want:  cascade.Decision{Admitted: true, Statuses: []cascade.Status{ok(3000, 0)}},
			after: []State{three.Full(t0 + 100)},
		},
		{
			name:   "refund repays debt",
			debits: []cascade.Debit{refund(three, 2*tok)},
			slot:   []int{0}, states: []State{hold(three, -3000, t0)}, at: t0,
			want:  cascade.Decision{Admitted: true, Statuses: []cascade.Status{ok(-1000, 1334*ms)}},
			after: []State{hold(three, -1000, t0)},
		},
		{
			name:   "advisory refusal is reported and not debited",
			debits: []cascade.Debit{advisory(consume(three, 2*tok)), consume(one, tok)},
			slot:   []int{0, 1}, states: []State{hold(three, 1500, t0), one.Full(t0)}, at: t0,
			// 500 mt short at 3 mt/ms: ⌈166.7⌉ ms.
			want: cascade.Decision{Admitted: true, Statuses: []cascade.Status{
				no(1500, 167*ms, 500*ms), ok(0, 1000*ms)}},
			after: []State{hold(three, 1500, t0), hold(one, 0, t0)},
		},
		{
			name:   "advisory admitted is debited",
			debits: []cascade.Debit{advisory(consume(one, tok)), consume(three, tok)},
			slot:   []int{0, 1}, states: []State{one.Full(t0), full3}, at: t0,
			want:  cascade.Decision{Admitted: true, Statuses: []cascade.Status{ok(0, 1000*ms), ok(2000, 334*ms)}},
			after: []State{hold(one, 0, t0), hold(three, 2000, t0)},
		},
		{
			name:   "advisory admitted is not debited when an enforced debit refuses",
			debits: []cascade.Debit{advisory(consume(one, tok)), consume(three, 4*tok)},
			slot:   []int{0, 1}, states: []State{one.Full(t0), full3}, at: t0,
			want: cascade.Decision{Statuses: []cascade.Status{
				ok(1000, 0), no(3000, 334*ms, 0)}},
			after: []State{one.Full(t0), full3},
		},
		{
			name:   "quota: one refused, one admitted; only the admitted is debited",
			debits: []cascade.Debit{quota(consume(one, tok)), quota(consume(three, tok))},
			slot:   []int{0, 1}, states: []State{hold(one, 0, t0), full3}, at: t0,
			want: cascade.Decision{Admitted: true, Statuses: []cascade.Status{
				no(0, 1000*ms, 1000*ms), ok(2000, 334*ms)}},
			after: []State{hold(one, 0, t0), hold(three, 2000, t0)},
		},
		{
			name:   "quota: every quota refused refuses the plan",
			debits: []cascade.Debit{quota(consume(one, tok)), quota(consume(three, 4*tok)), consume(three, tok)},
			slot:   []int{0, 1, 1}, states: []State{hold(one, 0, t0), full3}, at: t0,
			// the refused plan waits until three holds 4 tokens and 1 more after them: 5, as if uncapped.
			want: cascade.Decision{Statuses: []cascade.Status{
				no(0, 1000*ms, 1000*ms), no(3000, 667*ms, 0), ok(3000, 0)}},
			after: []State{hold(one, 0, t0), full3},
		},
		{
			name:   "quota refused with an enforced refusal",
			debits: []cascade.Debit{quota(consume(three, tok)), consume(one, tok)},
			slot:   []int{0, 1}, states: []State{full3, hold(one, 0, t0)}, at: t0,
			want: cascade.Decision{Statuses: []cascade.Status{
				ok(3000, 0), no(0, 1000*ms, 1000*ms)}},
			after: []State{full3, hold(one, 0, t0)},
		},
		{
			name:   "check admitted while the bucket holds a millitoken",
			debits: []cascade.Debit{check(three)},
			slot:   []int{0}, states: []State{hold(three, 1, t0)}, at: t0,
			want:  cascade.Decision{Admitted: true, Statuses: []cascade.Status{ok(1, 1000*ms)}},
			after: []State{hold(three, 1, t0)},
		},
		{
			name:   "check admitted at zero, refused in debt",
			debits: []cascade.Debit{check(three), check(slow)},
			slot:   []int{0, 1}, states: []State{hold(three, 0, t0), hold(slow, -1, t0)}, at: t0,
			// slow must reach 0: 1 mt at 20 ms each.
			want:  cascade.Decision{Statuses: []cascade.Status{ok(0, 1000*ms), no(-1, 20*ms, 60_020*ms)}},
			after: []State{hold(three, 0, t0), hold(slow, -1, t0)},
		},
		{
			name:   "consume of zero admitted at zero, refused in debt",
			debits: []cascade.Debit{consume(three, 0), consume(slow, 0)},
			slot:   []int{0, 1}, states: []State{hold(three, 0, t0), hold(slow, -1, t0)}, at: t0,
			// slow must reach 0: 1 mt at 20 ms each.
			want:  cascade.Decision{Statuses: []cascade.Status{ok(0, 1000*ms), no(-1, 20*ms, 60_020*ms)}},
			after: []State{hold(three, 0, t0), hold(slow, -1, t0)},
		},
		{
			name:   "a clock behind the level sees the bucket in debt",
			debits: []cascade.Debit{consume(three, tok)},
			slot:   []int{0}, states: []State{hold(three, 0, t0)}, at: t0 - 500,
			// nothing accrues for the 500 ms until t0, then 334 ms.
			want:  cascade.Decision{Statuses: []cascade.Status{no(-1500, 834*ms, 1500*ms)}},
			after: []State{hold(three, 0, t0)},
		},
		{
			name:   "an unknown op is refused and changes nothing",
			debits: []cascade.Debit{d(cascade.Op(77), three, tok)},
			slot:   []int{0}, states: []State{hold(three, 0, t0)}, at: t0,
			want:  cascade.Decision{Statuses: []cascade.Status{no(0, 1*ms, 1000*ms)}},
			after: []State{hold(three, 0, t0)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &cascade.Plan{Debits: tt.debits}
			levels := stored(tt.states)
			got := cascade.Decide(p, tt.slot, levels, tt.at)
			if !sameDecision(p, got, tt.want) {
				t.Errorf("Decide(%s) = %s, want %s", describe(p, tt.slot), format(got), format(tt.want))
			}
			for i := range tt.after {
				if s := levels[i].State(); s != tt.after[i] {
					t.Errorf("Decide(%s): level %d = %v, want %v", describe(p, tt.slot), i, s.X, tt.after[i].X)
				}
				if changed := tt.after[i] != tt.states[i]; levels[i].Changed() != changed {
					t.Errorf("Decide(%s): level %d Changed = %t, want %t", describe(p, tt.slot), i, levels[i].Changed(), changed)
				}
			}
		})
	}
}

// TestDecideManySlots decides plans over more buckets than Decide keeps on
// the stack.
func TestDecideManySlots(t *testing.T) {
	for _, n := range []int{7, 8, 9, 16, 40} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			p := &cascade.Plan{}
			var slot []int
			var states []State
			for i := range n {
				p.Debits = append(p.Debits, consume(three, tok))
				slot = append(slot, i)
				states = append(states, three.Full(t0))
			}
			levels := stored(states)
			dec := cascade.Decide(p, slot, levels, t0)
			if !dec.Admitted || len(dec.Statuses) != n {
				t.Fatalf("Decide(%d slots) = %s, want admitted with %d statuses", n, format(dec), n)
			}
			for i := range levels {
				if s := levels[i].State(); s != hold(three, 2000, t0) {
					t.Fatalf("Decide(%d slots): level %d = %v, want 2000 held", n, i, s.X)
				}
			}
			// The last bucket now refuses 3 tokens: nothing anywhere is debited.
			p.Debits[n-1].Amount = 3 * tok
			levels = stored(statesOf(levels))
			dec = cascade.Decide(p, slot, levels, t0)
			if dec.Admitted {
				t.Fatalf("Decide(%d slots, last over) admitted, want refused", n)
			}
			for i, st := range dec.Statuses {
				want := ok(2000, 334*ms)
				if i == n-1 {
					want = no(2000, 334*ms, 334*ms)
				}
				want.Bucket = p.Debits[i].Bucket
				if st != want {
					t.Errorf("Decide(%d slots, last over): status %d = %+v, want %+v", n, i, st, want)
				}
			}
			for i := range levels {
				if s := levels[i].State(); s != hold(three, 2000, t0) || levels[i].Changed() {
					t.Fatalf("Decide(%d slots, last over): level %d = %v (changed %t), want unchanged", n, i, s.X, levels[i].Changed())
				}
			}
		})
	}
}

// TestDecideRetry: after a refused plan of consumes and checks, the same
// plan is admitted once the longest RetryAfter has passed, and not a
// millisecond earlier, when every bucket can hold what the plan asks of it.
// Equivalent mutant, read by internal/mutants (make mutation): where a
// retry's demand sums to exactly MaxInt64, saturating gives the same
// MaxInt64 as adding.
//
// mutant: CONDITIONALS_BOUNDARY decide.go `a > math.MaxInt64-b` addSat: at a = MaxInt64−b both branches return MaxInt64.
func TestDecideRetry(t *testing.T) {
	tests := []struct {
		name   string
		debits []cascade.Debit
		slot   []int
		states []State
	}{
		{"one bucket", []cascade.Debit{consume(three, 2*tok)}, []int{0}, []State{hold(three, 0, t0)}},
		{"two buckets", []cascade.Debit{consume(three, 2*tok), consume(one, tok)}, []int{0, 1}, []State{hold(three, 2500, t0), hold(one, 0, t0)}},
		{"shared, second refused", []cascade.Debit{consume(three, 2*tok), consume(three, tok)}, []int{0, 0}, []State{hold(three, 2000, t0)}},
		{"shared, first refused", []cascade.Debit{consume(three, 2*tok), consume(three, tok)}, []int{0, 0}, []State{hold(three, 1500, t0)}},
		{"shared with a check", []cascade.Debit{consume(three, 2*tok), check(three)}, []int{0, 0}, []State{hold(three, 1999, t0)}},
		{"shared in debt", []cascade.Debit{check(slow), consume(slow, tok), consume(slow, 500)}, []int{0, 0, 0}, []State{hold(slow, -100_000, t0)}},
		{"a check alone", []cascade.Debit{check(slow)}, []int{0}, []State{hold(slow, -3, t0)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &cascade.Plan{Debits: tt.debits}
			levels := stored(tt.states)
			dec := cascade.Decide(p, tt.slot, levels, t0)
			if dec.Admitted {
				t.Fatalf("Decide(%s) admitted, want refused", describe(p, tt.slot))
			}
			var wait time.Duration
			for _, st := range dec.Statuses {
				wait = max(wait, st.RetryAfter)
			}
			if wait == 0 {
				t.Fatalf("Decide(%s) = %s: refused with no wait", describe(p, tt.slot), format(dec))
			}
			later := t0 + wait.Milliseconds()
			if again := cascade.Decide(p, tt.slot, stored(statesOf(levels)), later); !again.Admitted {
				t.Errorf("Decide(%s) at +%v = %s, want admitted after the longest RetryAfter", describe(p, tt.slot), wait, format(again))
			}
			if again := cascade.Decide(p, tt.slot, stored(statesOf(levels)), later-1); again.Admitted {
				t.Errorf("Decide(%s) at +%v−1ms admitted: RetryAfter is not exact", describe(p, tt.slot), wait)
			}
		})
	}
}

// sameDecision compares a decision on p with the one wanted; each status
// must report its debit's limit as the one applied (the tables leave it out).
func sameDecision(p *cascade.Plan, got, want cascade.Decision) bool {
	if got.Admitted != want.Admitted || len(got.Statuses) != len(want.Statuses) {
		return false
	}
	for i := range got.Statuses {
		g, w := got.Statuses[i], want.Statuses[i]
		if g.Bucket != p.Debits[i].Bucket {
			return false
		}
		g.Bucket, w.Bucket = tokenbucket.Limit{}, tokenbucket.Limit{}
		if g != w {
			return false
		}
	}
	return true
}

func format(dec cascade.Decision) string {
	var b strings.Builder
	fmt.Fprintf(&b, "{admitted:%t", dec.Admitted)
	for _, s := range dec.Statuses {
		fmt.Fprintf(&b, " {ok:%t rem:%d retry:%v reset:%v}", s.OK, s.Remaining, s.RetryAfter, s.ResetAfter)
	}
	return b.String() + "}"
}

func describe(p *cascade.Plan, slot []int) string {
	var parts []string
	for i, x := range p.Debits {
		parts = append(parts, fmt.Sprintf("%v/%d %d@slot%d", x.Op, x.Role, x.Amount, slot[i]))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// TestBusy: a plan a store was too busy to decide is refused with the
// retry-after given, but for what never refuses: advisory debits and
// refunds are OK, and a plan of only those is admitted.
func TestBusy(t *testing.T) {
	cases := []struct {
		name     string
		debits   []cascade.Debit
		wantOK   []bool
		admitted bool
	}{
		{"enforced", []cascade.Debit{{Role: cascade.Enforce}}, []bool{false}, false},
		{"enforced and advisory", []cascade.Debit{{Role: cascade.Enforce}, {Role: cascade.Advisory}}, []bool{false, true}, false},
		{"advisory only", []cascade.Debit{{Role: cascade.Advisory}}, []bool{true}, true},
		{"refund", []cascade.Debit{{Op: cascade.Refund}}, []bool{true}, true},
		{"quota", []cascade.Debit{{Role: cascade.Quota}}, []bool{false}, false},
	}
	for _, c := range cases {
		dec := cascade.Busy(c.debits, 7*time.Millisecond)
		if dec.Admitted != c.admitted {
			t.Errorf("Busy(%s).Admitted = %t, want %t", c.name, dec.Admitted, c.admitted)
		}
		for i, st := range dec.Statuses {
			wantRetry := 7 * time.Millisecond
			if c.wantOK[i] {
				wantRetry = 0
			}
			if st.OK != c.wantOK[i] || st.RetryAfter != wantRetry {
				t.Errorf("Busy(%s) status %d = OK %t retry %v, want OK %t retry %v", c.name, i, st.OK, st.RetryAfter, c.wantOK[i], wantRetry)
			}
		}
	}
}

func TestSettlementValidate(t *testing.T) {
	ok := cascade.Settlement{ID: "l1", Debits: []cascade.Debit{{Op: cascade.Charge, Amount: 5}, {Op: cascade.Refund, Shard: 2}}}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid settlement: %v", err)
	}
	bad := map[string]cascade.Settlement{
		"empty id":    {},
		"long id":     {ID: strings.Repeat("x", cascade.MaxSettlementID+1)},
		"consume":     {ID: "a", Debits: []cascade.Debit{{Op: cascade.Consume}}},
		"check":       {ID: "a", Debits: []cascade.Debit{{Op: cascade.Check}}},
		"negative":    {ID: "a", Debits: []cascade.Debit{{Op: cascade.Charge, Amount: -1}}},
		"minus shard": {ID: "a", Debits: []cascade.Debit{{Op: cascade.Refund, Shard: -1}}},
	}
	for name, s := range bad {
		if err := s.Validate(); !errors.Is(err, cascade.ErrSettlement) || !errors.Is(err, cascade.ErrInvalid) {
			t.Errorf("%s: Validate = %v, want ErrSettlement and ErrInvalid", name, err)
		}
	}
}
