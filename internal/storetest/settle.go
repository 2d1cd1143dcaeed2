package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// Settler is a store that also settles (see cascade.Settlement).
// Implementations must be safe for concurrent use.
type Settler interface {
	Store
	Settle(ctx context.Context, st *cascade.Settlement) (cascade.Settled, error)
}

// SettleFactory returns a fresh, empty store that reads the time from
// clock.Now, like Factory.
type SettleFactory func(t *testing.T, clock *Clock) Settler

// settleTTL is how long after its settlement the suite's IDs may be
// forgotten: longer than any test runs.
const settleTTL = time.Hour

// RunSettle runs every settlement behaviour against stores made by f, one
// named subtest each, on a fresh store and a fixed Clock starting at Epoch.
// Every call is made on a Reference too, and every answer must equal the
// Reference's (the same math through cascade.Decide), besides the values
// each behaviour checks by hand. WithMaxCalls bounds the random one.
func RunSettle(t *testing.T, f SettleFactory, opts ...Option) {
	t.Helper()
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	tests := []struct {
		name string
		run  func(t *testing.T, p *pair)
	}{
		{"settle_charge_into_debt", testSettleDebt},
		{"settle_refund_capped", testSettleRefundCapped},
		{"settle_duplicate", testSettleDuplicate},
		{"settle_empty_then_duplicate", testSettleEmpty},
		{"settle_invalid", testSettleInvalid},
		{"settle_chain", testSettleChain},
		{"settle_random", func(t *testing.T, p *pair) { testSettleRandom(t, p, o.calls(400)) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := NewClock(Epoch)
			s := f(t, clock)
			if s == nil {
				t.Fatalf("storetest: factory returned a nil store")
			}
			tt.run(t, &pair{s: s, ref: NewReference(clock.Now), clock: clock})
		})
	}
}

// pair is a store under test and the Reference it must agree with, on one
// clock.
type pair struct {
	s     Settler
	ref   *Reference
	clock *Clock
}

// settle settles on both and fails the test unless they agree; it returns
// the store's answer.
func (p *pair) settle(t *testing.T, id string, ds ...cascade.Debit) cascade.Settled {
	t.Helper()
	st := &cascade.Settlement{ID: id, Expires: p.clock.Now().Add(settleTTL), Debits: ds}
	got, err := p.s.Settle(context.Background(), st)
	if err != nil {
		t.Fatalf("Settle(%q, %s) error = %v, want nil", id, describe(&cascade.Plan{Debits: ds}), err)
	}
	want, err := p.ref.Settle(context.Background(), st)
	if err != nil {
		t.Fatalf("Reference.Settle(%q) error = %v", id, err)
	}
	if !sameSettled(ds, got, want) {
		t.Fatalf("Settle(%q, %s) = %s, want %s", id, describe(&cascade.Plan{Debits: ds}), formatSettled(got), formatSettled(want))
	}
	return got
}

// acquire decides ds on both and fails the test unless they agree.
func (p *pair) acquire(t *testing.T, ds ...cascade.Debit) cascade.Decision {
	t.Helper()
	plan := &cascade.Plan{Debits: ds}
	got, err := p.s.Acquire(context.Background(), plan)
	if err != nil {
		t.Fatalf("Acquire(%s) error = %v, want nil", describe(plan), err)
	}
	want, err := p.ref.Acquire(context.Background(), plan)
	if err != nil {
		t.Fatalf("Reference.Acquire() error = %v", err)
	}
	if !sameDecision(plan, got, want, false) {
		t.Fatalf("Acquire(%s) = %s, want %s", describe(plan), format(got), format(want))
	}
	return got
}

// holds checks what the bucket of d holds now, by a check on both.
func (p *pair) holds(t *testing.T, d cascade.Debit, want tokenbucket.Millitokens) {
	t.Helper()
	d.Op, d.Amount, d.Role = cascade.Check, 0, cascade.Enforce
	if got := p.acquire(t, d).Statuses[0].Remaining; got != want {
		t.Errorf("%s %s holds %d, want %d", d.Key.Entity, d.Limit, got, want)
	}
}

// sameSettled compares a settlement's outcome with the one wanted: a
// duplicate has no statuses; an applied one a status per debit, each of
// shard 0 (the suite's buckets are not sharded) and the debit's limit.
func sameSettled(ds []cascade.Debit, got, want cascade.Settled) bool {
	if got.Duplicate != want.Duplicate || len(got.Statuses) != len(want.Statuses) {
		return false
	}
	if got.Duplicate {
		return got.Statuses == nil
	}
	if len(got.Statuses) != len(ds) {
		return false
	}
	for i := range got.Statuses {
		if got.Statuses[i] != want.Statuses[i] || got.Statuses[i].Bucket != ds[i].Bucket {
			return false
		}
	}
	return true
}

func formatSettled(s cascade.Settled) string {
	if s.Duplicate {
		return fmt.Sprintf("duplicate (%d statuses)", len(s.Statuses))
	}
	return format(cascade.Decision{Admitted: true, Statuses: s.Statuses})
}

// testSettleDebt: a charge past what the bucket holds takes it into debt,
// which refill repays; a check refuses until then.
func testSettleDebt(t *testing.T, p *pair) {
	p.acquire(t, consume("a", lOne, 1000))
	got := p.settle(t, "debt", charge("a", lOne, 2000))
	if got.Duplicate || len(got.Statuses) != 1 || got.Statuses[0].Remaining != -2000 {
		t.Fatalf("Settle(charge 2000 on an empty bucket) = %s, want applied, -2000 left", formatSettled(got))
	}
	if dec := p.acquire(t, check("a", lOne)); dec.Admitted || dec.Statuses[0].RetryAfter != 2000*ms {
		t.Errorf("check after the charge = %s, want refused, retry after 2s", format(dec))
	}
	p.clock.Advance(2000 * ms)
	p.holds(t, check("a", lOne), 0)
}

// testSettleRefundCapped: a refund never lifts a bucket above capacity.
func testSettleRefundCapped(t *testing.T, p *pair) {
	p.acquire(t, consume("a", l3, 1000))
	got := p.settle(t, "refund", refund("a", l3, 5000))
	if got.Duplicate || len(got.Statuses) != 1 || got.Statuses[0].Remaining != 3000 {
		t.Fatalf("Settle(refund 5000 of 2000 held, capacity 3000) = %s, want applied, 3000 left", formatSettled(got))
	}
	if dec := p.acquire(t, consume("a", l3, 3000)); !dec.Admitted {
		t.Errorf("consume 3000 after the refund = %s, want admitted", format(dec))
	}
	p.holds(t, check("a", l3), 0)
}

// testSettleDuplicate: an ID settles once, whatever the debits of a later
// Settle of it say; another ID settles.
func testSettleDuplicate(t *testing.T, p *pair) {
	p.settle(t, "once", charge("a", l3, 1000))
	for _, d := range []cascade.Debit{charge("a", l3, 1000), refund("a", l3, 1000), charge("b", l3, 500)} {
		if got := p.settle(t, "once", d); !got.Duplicate {
			t.Fatalf("Settle(once) again = %s, want a duplicate", formatSettled(got))
		}
	}
	p.holds(t, check("a", l3), 2000)
	p.holds(t, check("b", l3), 3000)
	p.settle(t, "twice", charge("a", l3, 1000))
	p.holds(t, check("a", l3), 1000)
}

// testSettleEmpty: a settlement without debits records its ID only.
func testSettleEmpty(t *testing.T, p *pair) {
	got := p.settle(t, "empty")
	if got.Duplicate || len(got.Statuses) != 0 {
		t.Fatalf("Settle(empty) = %s, want applied with no statuses", formatSettled(got))
	}
	if got := p.settle(t, "empty", charge("a", l3, 1000)); !got.Duplicate {
		t.Fatalf("Settle(empty) again with a charge = %s, want a duplicate", formatSettled(got))
	}
	p.holds(t, check("a", l3), 3000)
}

// testSettleInvalid: a settlement no store can apply is an error wrapping
// cascade.ErrSettlement, and records nothing.
func testSettleInvalid(t *testing.T, p *pair) {
	neg := charge("a", l3, -1)
	shard := charge("a", l3, 1000)
	shard.Shard = -1
	tests := []struct {
		name string
		st   cascade.Settlement
	}{
		{"empty id", cascade.Settlement{Debits: []cascade.Debit{charge("a", l3, 1000)}}},
		{"id too long", cascade.Settlement{ID: strings.Repeat("x", cascade.MaxSettlementID+1)}},
		{"a consume", cascade.Settlement{ID: "bad", Debits: []cascade.Debit{charge("a", l3, 1000), consume("a", l3, 1000)}}},
		{"a check", cascade.Settlement{ID: "bad", Debits: []cascade.Debit{check("a", l3)}}},
		{"negative amount", cascade.Settlement{ID: "bad", Debits: []cascade.Debit{neg}}},
		{"negative shard", cascade.Settlement{ID: "bad", Debits: []cascade.Debit{shard}}},
		{"invalid limit", cascade.Settlement{ID: "bad", Debits: []cascade.Debit{charge("a", tokenbucket.Limit{}, 1000)}}},
	}
	for _, tt := range tests {
		st := tt.st
		st.Expires = p.clock.Now().Add(settleTTL)
		if got, err := p.s.Settle(context.Background(), &st); !errors.Is(err, cascade.ErrSettlement) {
			t.Errorf("Settle(%s) = %s, %v, want an error wrapping ErrSettlement", tt.name, formatSettled(got), err)
		}
	}
	p.holds(t, check("a", l3), 3000)
	if got := p.settle(t, "bad", charge("a", l3, 1000)); got.Duplicate {
		t.Errorf("Settle(bad) after invalid settlements of that ID = duplicate, want applied")
	}
}

// testSettleChain settles a charge on every level of a three-level chain:
// each level ends down by the estimate and the charge alike.
func testSettleChain(t *testing.T, p *pair) {
	levels := []cascade.Debit{named(consume("key-1", lTPM, 500), "tpm"), named(consume("proj", lTPM, 500), "tpm"), named(consume("acme", lTPM, 500), "tpm")}
	p.acquire(t, chain(levels...)...)
	var ds []cascade.Debit
	for _, d := range levels {
		d.Op, d.Amount = cascade.Charge, 1500
		ds = append(ds, d)
	}
	got := p.settle(t, "chain", chain(ds...)...)
	for i, st := range got.Statuses {
		if st.Remaining != 98_000 {
			t.Errorf("Settle(chain) level %d holds %d, want 98000", i, st.Remaining)
		}
	}
	for _, d := range levels {
		p.holds(t, d, 98_000)
	}
}

// testSettleRandom makes n random calls, on random buckets at random
// instants: consumes and checks, and settlements of random charges and
// refunds, some of them with an ID already settled. Every answer must be
// the Reference's.
func testSettleRandom(t *testing.T, p *pair, n int) {
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 25))
	seed := rng.Uint64()
	rng = rand.New(rand.NewPCG(seed, 25))
	t.Logf("seed %d", seed)
	limits := []tokenbucket.Limit{l3, lFive, lThird, lMinute}
	bucket := func() cascade.Debit {
		i := rng.IntN(len(limits))
		d := named(consume(fmt.Sprintf("e%d", rng.IntN(3)), limits[i], 0), fmt.Sprintf("l%d", i))
		d.Role = cascade.Role(rng.IntN(3))
		return d
	}
	var ids []string
	for i := range n {
		p.clock.Advance(time.Duration(rng.IntN(400)) * ms)
		if rng.IntN(3) == 0 {
			d := bucket()
			d.Amount = tokenbucket.Millitokens(rng.IntN(2000))
			if rng.IntN(4) == 0 {
				d.Op = cascade.Check
			}
			p.acquire(t, d)
			continue
		}
		id := fmt.Sprintf("id-%d", i)
		if len(ids) > 0 && rng.IntN(5) == 0 {
			id = ids[rng.IntN(len(ids))]
		} else {
			ids = append(ids, id)
		}
		ds := make([]cascade.Debit, rng.IntN(4))
		for j := range ds {
			ds[j] = bucket()
			ds[j].Op = cascade.Charge
			if rng.IntN(2) == 0 {
				ds[j].Op = cascade.Refund
			}
			ds[j].Amount = tokenbucket.Millitokens(rng.IntN(6000))
		}
		p.settle(t, id, ds...)
	}
}
