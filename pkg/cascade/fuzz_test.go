package cascade_test

import (
	"encoding/binary"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// planReader decodes fuzz bytes; reads past the end yield zeros.
type planReader struct{ b []byte }

func (r *planReader) u8() byte {
	if len(r.b) == 0 {
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *planReader) u32() uint32 {
	var buf [4]byte
	n := copy(buf[:], r.b)
	r.b = r.b[n:]
	return binary.LittleEndian.Uint32(buf[:])
}

// fuzzCase is a plan over nSlots buckets with the image a store loaded:
// each bucket's level, stored or new.
type fuzzCase struct {
	p      cascade.Plan
	slot   []int
	states []State
	isNew  []bool
	limits []tokenbucket.Limit // one per slot
	at     []int               // where each debit starts in the fuzz bytes
}

func (c *fuzzCase) levels(states []State) []tokenbucket.Level {
	levels := make([]tokenbucket.Level, len(states))
	for k, s := range states {
		if c.isNew[k] {
			levels[k] = tokenbucket.New(s)
		} else {
			levels[k] = tokenbucket.Stored(s)
		}
	}
	return levels
}

func decodeCase(data []byte, now int64) fuzzCase {
	r := &planReader{b: data}
	var c fuzzCase
	nSlots := 1 + int(r.u8()%12)
	c.limits = make([]tokenbucket.Limit, nSlots)
	for k := range c.limits {
		shape := r.u8()
		cp := Millitokens(1 + r.u32()%100_000)
		ra := Millitokens(1 + r.u32()%100_000)
		rp := time.Duration(1+r.u32()%3_600_000) * time.Millisecond
		switch shape % 4 {
		case 1:
			cp, ra = cp*1e9, ra*1e9 // up to 10^11 tokens
		case 2:
			rp = time.Duration(1+r.u32()%uint32(tokenbucket.MaxPeriod/time.Second)) * time.Second
		}
		l := tokenbucket.Limit{Capacity: cp, RefillAmount: ra, RefillPeriod: rp}
		c.limits[k] = l
		at := now - int64(int16(r.u32()))
		var s State
		isNew := false
		switch sel := r.u8(); sel % 7 {
		case 0:
			s = l.Full(at)
		case 1:
			s = l.Empty(at)
		case 2:
			s = hold(l, -cp*Millitokens(1+sel%5), at) // in debt
		case 3:
			s = hold(l, cp*Millitokens(2+sel%5), at) // full for long
		case 4:
			s, isNew = l.Full(now), true
		case 5:
			s, isNew = l.Empty(now), true
		default:
			s = hold(l, Millitokens(int64(r.u32())%int64(2*cp))-cp/2, at)
		}
		c.states = append(c.states, s)
		c.isNew = append(c.isNew, isNew)
	}
	for len(r.b) > 0 && len(c.p.Debits) < 24 {
		c.at = append(c.at, len(data)-len(r.b))
		b := r.u8()
		k := int(r.u8()) % nSlots
		l := c.limits[k]
		v := r.u32()
		var n Millitokens
		switch b >> 5 {
		case 0:
			n = 0
		case 1:
			n = -Millitokens(v)
		case 2:
			n = tokenbucket.MaxMillitokens
		default:
			n = Millitokens(uint64(v) * uint64(l.Capacity) / math.MaxUint32)
		}
		c.p.Debits = append(c.p.Debits, cascade.Debit{
			Bucket: l, Amount: n, Op: cascade.Op(b % 4), Role: cascade.Role((b >> 2) % 3),
		})
		c.slot = append(c.slot, k)
	}
	return c
}

// bucketModel is one bucket in math/big, written apart from tokenbucket:
// it holds min(cp·rp, t·ra − x)/rp millitokens at t.
type bucketModel struct {
	l       tokenbucket.Limit
	x       *big.Int
	touched bool
}

func (m *bucketModel) ints() (cp, ra, rp *big.Int) {
	return big.NewInt(int64(m.l.Capacity)), big.NewInt(int64(m.l.RefillAmount)), big.NewInt(m.l.RefillPeriod.Milliseconds())
}

// held returns what the bucket holds at t, times rp, capped or not.
func (m *bucketModel) held(t int64, capped bool) *big.Int {
	cp, ra, rp := m.ints()
	h := new(big.Int).Mul(big.NewInt(t), ra)
	h.Sub(h, m.x)
	if top := new(big.Int).Mul(cp, rp); capped && h.Cmp(top) > 0 {
		h = top
	}
	return h
}

// move lifts a level above capacity to capacity, then adds n·rp.
func (m *bucketModel) move(t int64, n Millitokens) {
	cp, ra, rp := m.ints()
	if n < 0 {
		m.x.Add(m.x, new(big.Int).Mul(big.NewInt(int64(n)), rp))
	}
	base := new(big.Int).Mul(big.NewInt(t), ra)
	base.Sub(base, new(big.Int).Mul(cp, rp))
	if m.x.Cmp(base) < 0 {
		m.x.Set(base)
	}
	if n > 0 {
		m.x.Add(m.x, new(big.Int).Mul(big.NewInt(int64(n)), rp))
	}
	m.touched = true
}

// has reports whether the bucket holds n at t.
func (m *bucketModel) has(t int64, n Millitokens) bool {
	_, _, rp := m.ints()
	return m.held(t, true).Cmp(new(big.Int).Mul(big.NewInt(int64(n)), rp)) >= 0
}

// model decides the plan independently of Decide: each debit in order on
// the buckets, the admission rule, and for a refused plan the charges and
// refunds alone on the buckets as they were.
func model(c *fuzzCase, states []State, now int64) (admitted bool, oks []bool, buckets []bucketModel) {
	fresh := func() []bucketModel {
		bs := make([]bucketModel, len(states))
		for k, s := range states {
			bs[k] = bucketModel{l: c.limits[k], x: toBig(s.X)}
		}
		return bs
	}
	apply := func(bs []bucketModel, judge bool) []bool {
		oks := make([]bool, len(c.p.Debits))
		for i, d := range c.p.Debits {
			m := &bs[c.slot[i]]
			a := max(d.Amount, 0)
			switch d.Op {
			case cascade.Consume:
				oks[i] = a <= d.Bucket.Capacity && m.has(now, a)
				if oks[i] && judge && a > 0 {
					m.move(now, a)
				}
			case cascade.Check:
				oks[i] = m.has(now, 0)
			case cascade.Charge:
				oks[i] = a <= d.Bucket.Capacity && m.has(now, a)
				if a > 0 {
					m.move(now, a)
				}
			case cascade.Refund:
				oks[i] = true
				if a > 0 {
					m.move(now, -a)
				}
			}
		}
		return oks
	}
	work := fresh()
	oks = apply(work, true)
	statuses := make([]cascade.Status, len(oks))
	for i := range oks {
		statuses[i].OK = oks[i]
	}
	if cascade.Admit(c.p.Debits, statuses) {
		return true, oks, work
	}
	final := fresh()
	apply(final, false) // consumes are judged, never debited
	return false, oks, final
}

func toBig(a tokenbucket.Int128) *big.Int {
	v := new(big.Int).Lsh(big.NewInt(a.Hi), 64)
	return v.Add(v, new(big.Int).SetUint64(a.Lo))
}

func ceilMs(num, den *big.Int) time.Duration {
	if num.Sign() <= 0 {
		return 0
	}
	q := new(big.Int).Add(num, new(big.Int).Sub(den, big.NewInt(1)))
	q.Quo(q, den)
	q.Mul(q, big.NewInt(int64(time.Millisecond)))
	if !q.IsInt64() {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(q.Int64())
}

// demands is what each bucket must hold for a retry of a refused plan.
func demands(c *fuzzCase) []Millitokens {
	before := make([]Millitokens, len(c.states))
	most := make([]Millitokens, len(c.states))
	for i, d := range c.p.Debits {
		k := c.slot[i]
		if d.Op == cascade.Refund {
			continue
		}
		need := Millitokens(1)
		switch d.Op {
		case cascade.Consume, cascade.Charge:
			need = max(d.Amount, 0)
		case cascade.Check:
			need = 0
		}
		most[k] = max(most[k], sat(before[k], need))
		if d.Op == cascade.Consume || d.Op == cascade.Charge {
			before[k] = sat(before[k], max(d.Amount, 0))
		}
	}
	return most
}

func sat(a, b Millitokens) Millitokens {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// expect returns the decision the model makes of c on states at now.
func expect(c *fuzzCase, states []State, now int64) (cascade.Decision, []bucketModel) {
	admitted, oks, buckets := model(c, states, now)
	dec := cascade.Decision{Admitted: admitted, Statuses: make([]cascade.Status, len(oks))}
	var dem []Millitokens
	if !admitted {
		dem = demands(c)
	}
	for i, d := range c.p.Debits {
		m := &buckets[c.slot[i]]
		cp, ra, rp := m.ints()
		h := m.held(now, true)
		q := new(big.Int).Div(h, rp) // Euclidean: floor for rp > 0
		rem := tokenbucket.MinMillitokens
		if q.Cmp(big.NewInt(int64(tokenbucket.MinMillitokens))) > 0 {
			rem = Millitokens(q.Int64())
		}
		st := cascade.Status{OK: oks[i], Remaining: rem, Bucket: d.Bucket}
		st.ResetAfter = ceilMs(new(big.Int).Sub(new(big.Int).Mul(cp, rp), m.held(now, false)), ra)
		if !st.OK {
			n := Millitokens(1)
			switch {
			case !admitted:
				n = dem[c.slot[i]]
			case d.Op == cascade.Check:
				n = 0
			case d.Op == cascade.Consume || d.Op == cascade.Charge:
				n = max(d.Amount, 0)
			}
			n = min(n, tokenbucket.MaxMillitokens)
			st.RetryAfter = ceilMs(new(big.Int).Sub(new(big.Int).Mul(big.NewInt(int64(n)), rp), h), ra)
		}
		dec.Statuses[i] = st
	}
	return dec, buckets
}

// FuzzDecide checks Decide against the model (admission, statuses, levels,
// what is written), the conditional write of the whole plan, and the retry
// of refused plans.
func FuzzDecide(f *testing.F) {
	f.Add(t0, []byte{1, 0, 10, 0, 0, 0, 10, 0, 0, 0, 10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 96, 0, 255, 255, 255, 255, 96, 0, 255, 255, 255, 255})
	f.Add(t0, []byte{2, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 98, 0, 1, 1, 1, 1, 97, 1, 0, 0, 0, 8, 102, 1, 9, 9, 9, 9})
	f.Add(int64(0), []byte{11, 2, 255, 255, 255, 255, 3, 0, 0, 0, 9, 0, 0, 0, 7, 0, 2})
	f.Add(int64(-5), []byte{0, 3, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 4, 99, 0, 5, 0, 0, 0, 66, 0, 1, 0, 0, 0, 40, 0, 0, 0, 0, 0})
	f.Add(t0, []byte{1, 0, 5, 0, 0, 0, 5, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 3, 96, 0, 0, 0, 0, 128, 99, 0, 0, 0, 0, 128, 98, 1, 0, 0, 0, 64})
	f.Fuzz(func(t *testing.T, now int64, data []byte) { checkDecide(t, now, data, nil) })
}

// TestDecideRandom runs FuzzDecide's checks over random plans, half of them
// refused plans of enforced consumes and checks that the retry check covers.
func TestDecideRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	retried := 0
	for i := range 20_000 {
		data := make([]byte, 8+r.IntN(120))
		for j := range data {
			data[j] = byte(r.Uint32())
		}
		if i%2 == 0 {
			// Few slots; a few enforced consumes and checks of at most an
			// eighth of the capacity each.
			data[0] %= 3
			c := decodeCase(data, t0)
			if len(c.at) > 6 {
				data, c.at = data[:c.at[6]], c.at[:6]
			}
			for _, j := range c.at {
				data[j] = 0x60 | data[j]&1
				if j+5 < len(data) {
					data[j+5] &= 0x1f
				}
			}
		}
		if checkDecide(t, t0+r.Int64N(1000), data, r) {
			retried++
		}
	}
	t.Logf("%d of 20000 random plans exercised the retry check", retried)
	if retried < 1000 {
		t.Fatalf("only %d of 20000 random plans exercised the retry check, want at least 1000", retried)
	}
}

// checkDecide runs the checks of FuzzDecide and reports whether the retry
// check ran. r, when not nil, adds random stored levels within the bounds.
func checkDecide(t *testing.T, now int64, data []byte, r *rand.Rand) bool {
	t.Helper()
	c := decodeCase(data, now)
	levels := c.levels(c.states)
	dec := cascade.Decide(&c.p, c.slot, levels, now)
	want, buckets := expect(&c, c.states, now)
	if !sameDecision(&c.p, dec, want) {
		t.Fatalf("Decide(%s) = %s, model %s", describe(&c.p, c.slot), format(dec), format(want))
	}
	charges := false
	for _, d := range c.p.Debits {
		charges = charges || ((d.Op == cascade.Charge || d.Op == cascade.Refund) && d.Amount > 0)
	}
	for k := range levels {
		if got, want := toBig(levels[k].State().X), buckets[k].x; got.Cmp(want) != 0 {
			t.Fatalf("Decide(%s) = %s: slot %d from %v holds level %v, model %v", describe(&c.p, c.slot), format(dec), k, c.states[k].X, got, want)
		}
		if levels[k].Changed() && !buckets[k].touched {
			t.Fatalf("Decide(%s): slot %d Changed without a debit or credit", describe(&c.p, c.slot), k)
		}
		if !dec.Admitted && !charges && levels[k].Changed() {
			t.Fatalf("Decide(%s): refused without charges or refunds, yet slot %d Changed", describe(&c.p, c.slot), k)
		}
		if tk := c.limits[k].Tokens(levels[k].State(), now); tk > c.limits[k].Capacity {
			t.Fatalf("slot %d: %d mt above capacity", k, tk)
		}
	}
	checkConditionalPlan(t, &c, levels, dec, now, r)

	if dec.Admitted || !retryable(&c) {
		return false
	}
	var wait time.Duration
	for _, st := range dec.Statuses {
		wait = max(wait, st.RetryAfter)
	}
	if wait == time.Duration(math.MaxInt64) || now > math.MaxInt64-wait.Milliseconds() {
		return false
	}
	after := statesOf(levels)
	later := now + wait.Milliseconds()
	if again := cascade.Decide(&c.p, c.slot, c.levels(after), later); !again.Admitted {
		t.Fatalf("Decide(%s) at %d = %s; retried after %v at %d = %s, want admitted",
			describe(&c.p, c.slot), now, format(dec), wait, later, format(again))
	}
	if wait > 0 {
		if again := cascade.Decide(&c.p, c.slot, c.levels(after), later-1); again.Admitted {
			t.Fatalf("Decide(%s) at %d = %s; retried 1 ms before the wait of %v: admitted", describe(&c.p, c.slot), now, format(dec), wait)
		}
	}
	return true
}

// checkConditionalPlan: for stored levels anywhere within every level's
// Bounds, Decide decides the same (admission and per-debit outcomes) and
// leaves each level at Apply(stored): the plan's conditional writes are the
// decision.
func checkConditionalPlan(t *testing.T, c *fuzzCase, levels []tokenbucket.Level, dec cascade.Decision, now int64, r *rand.Rand) {
	t.Helper()
	far := new(big.Int).Lsh(big.NewInt(1), 90)
	pick := func(k, how int) State {
		lo, hi := levels[k].Bounds()
		x := toBig(c.states[k].X)
		blo, bhi := toBig(lo), toBig(hi)
		if lo == tokenbucket.MinInt128 {
			blo = new(big.Int).Sub(x, far)
		}
		if hi == tokenbucket.MaxInt128 {
			bhi = new(big.Int).Add(x, far)
		}
		var y *big.Int
		switch how {
		case 0:
			y = blo
		case 1:
			y = bhi
		default:
			span := new(big.Int).Sub(bhi, blo)
			y = new(big.Int).Add(blo, new(big.Int).Rsh(span, 1))
			if r != nil && span.Sign() > 0 {
				// a random fraction of the span, in 1/2^32 steps
				frac := new(big.Int).Mul(span, big.NewInt(int64(r.Uint32())))
				y = new(big.Int).Add(blo, frac.Rsh(frac, 32))
			}
		}
		return State{X: fromBig(y)}
	}
	for variant := range 4 {
		alt := make([]State, len(levels))
		for k := range levels {
			alt[k] = c.states[k]
			if !c.isNew[k] {
				alt[k] = pick(k, (variant+k)%3)
			}
		}
		altLevels := c.levels(alt)
		again := cascade.Decide(&c.p, c.slot, altLevels, now)
		oks := func(d cascade.Decision) []bool {
			var o []bool
			for _, st := range d.Statuses {
				o = append(o, st.OK)
			}
			return o
		}
		if again.Admitted != dec.Admitted || !slices.Equal(oks(again), oks(dec)) {
			t.Fatalf("Decide(%s) from levels within the bounds %v = %s, from %v = %s", describe(&c.p, c.slot), alt, format(again), c.states, format(dec))
		}
		for k := range levels {
			if got, want := altLevels[k].State().X, levels[k].Apply(alt[k].X); got != want {
				t.Fatalf("Decide(%s): slot %d from %v (within the bounds of %v) leaves %v, Apply gives %v", describe(&c.p, c.slot), k, alt[k].X, c.states[k].X, got, want)
			}
		}
		if want, _ := expect(c, alt, now); !sameDecision(&c.p, again, want) {
			t.Fatalf("Decide(%s) from %v = %s, model %s", describe(&c.p, c.slot), alt, format(again), format(want))
		}
	}
}

func fromBig(v *big.Int) tokenbucket.Int128 {
	two128 := new(big.Int).Lsh(big.NewInt(1), 128)
	m := new(big.Int).Mod(v, two128)
	lo := new(big.Int).And(m, new(big.Int).SetUint64(math.MaxUint64)).Uint64()
	hi := new(big.Int).Rsh(m, 64).Uint64()
	return tokenbucket.Int128{Hi: int64(hi), Lo: lo}
}

// retryable reports whether c is a plan of enforced consumes and checks whose
// every bucket can hold what the plan asks of it.
func retryable(c *fuzzCase) bool {
	dem := demands(c)
	for i, d := range c.p.Debits {
		if d.Role != cascade.Enforce || (d.Op != cascade.Consume && d.Op != cascade.Check) {
			return false
		}
		if dem[c.slot[i]] > d.Bucket.Capacity {
			return false
		}
	}
	return true
}
