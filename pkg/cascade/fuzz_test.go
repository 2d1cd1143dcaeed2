package cascade_test

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
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

// fuzzCase is a plan over nSlots buckets with their stored states.
type fuzzCase struct {
	p      cascade.Plan
	slot   []int
	states []State
	limits []tokenbucket.Limit // one per slot
	at     []int               // where each debit starts in the fuzz bytes
}

func decodeCase(data []byte, now int64) fuzzCase {
	r := &planReader{b: data}
	var c fuzzCase
	nSlots := 1 + int(r.u8()%12)
	c.limits = make([]tokenbucket.Limit, nSlots)
	limits := c.limits
	for k := range limits {
		shape := r.u8()
		cp := Millitokens(1 + r.u32()%100_000)
		ra := Millitokens(1 + r.u32()%100_000)
		rp := time.Duration(1+r.u32()%3_600_000) * time.Millisecond
		switch shape % 4 {
		case 1:
			cp, ra = cp*1e9, ra*1e9 // up to 10^11 tokens
		case 2:
			rp = time.Duration(1+r.u32()%uint32((10*365*24*time.Hour).Seconds())) * time.Second
		}
		limits[k] = tokenbucket.Limit{Capacity: cp, RefillAmount: ra, RefillPeriod: rp}
		st := State{LastRefill: now - int64(int16(r.u32()))}
		switch sel := r.u8(); sel % 5 {
		case 0:
			st.Tokens = cp
		case 1:
			st.Tokens = 0
		case 2:
			st.Tokens = tokenbucket.MinMillitokens
		default:
			st.Tokens = Millitokens(int64(r.u32())%int64(2*cp)) - cp/2
		}
		c.states = append(c.states, st)
	}
	for len(r.b) > 0 && len(c.p.Debits) < 24 {
		c.at = append(c.at, len(data)-len(r.b))
		b := r.u8()
		k := int(r.u8()) % nSlots
		l := limits[k]
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

// model decides the plan independently of Decide: tokens only, each debit in
// order on the refilled states, then the admission rule.
func model(c fuzzCase, now int64) (admitted bool, oks []bool, final []Millitokens) {
	refilled := make([]Millitokens, len(c.states))
	for k, s := range c.states {
		if firstDebit(c.slot, k) < 0 {
			refilled[k] = s.Tokens // untouched
			continue
		}
		refilled[k] = c.limits[k].Refill(s, now).Tokens
	}
	apply := func(tokens []Millitokens, judge bool) []bool {
		oks := make([]bool, len(c.p.Debits))
		for i, d := range c.p.Debits {
			k := c.slot[i]
			a := max(d.Amount, 0)
			switch d.Op {
			case cascade.Consume:
				oks[i] = tokens[k] >= a
				if oks[i] && judge {
					tokens[k] -= a
				}
			case cascade.Check:
				oks[i] = tokens[k] > 0
			case cascade.Charge:
				oks[i] = tokens[k] > 0
				if tokens[k]-tokenbucket.MinMillitokens <= a {
					tokens[k] = tokenbucket.MinMillitokens
				} else {
					tokens[k] -= a
				}
			case cascade.Refund:
				oks[i] = true
				tokens[k] = min(tokens[k]+a, d.Bucket.Capacity) // a ≤ MaxMillitokens: no overflow
			}
		}
		return oks
	}
	work := append([]Millitokens(nil), refilled...)
	oks = apply(work, true)
	admitted = true
	quotas, quotaOK := 0, 0
	for i, d := range c.p.Debits {
		switch d.Role {
		case cascade.Enforce:
			admitted = admitted && oks[i]
		case cascade.Quota:
			quotas++
			if oks[i] {
				quotaOK++
			}
		}
	}
	admitted = admitted && (quotas == 0 || quotaOK > 0)
	if admitted {
		return true, oks, work
	}
	final = append([]Millitokens(nil), refilled...)
	apply(final, false) // consumes are judged, never debited
	return false, oks, final
}

func firstDebit(slot []int, k int) int {
	for i, s := range slot {
		if s == k {
			return i
		}
	}
	return -1
}

// FuzzDecide checks Decide against the model: the same admission and
// per-debit outcomes; admitted, each bucket loses exactly its applied
// consumes and charges and gains its refunds (capped) after refill; refused,
// only charges and refunds are applied; never above capacity nor below the
// debt floor; statuses carry the final state; a refused plan of enforced
// consumes and checks is admitted on retry after the longest RetryAfter.
func FuzzDecide(f *testing.F) {
	f.Add(t0, []byte{1, 0, 10, 0, 0, 0, 10, 0, 0, 0, 10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 96, 0, 255, 255, 255, 255, 96, 0, 255, 255, 255, 255})
	f.Add(t0, []byte{2, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 98, 0, 1, 1, 1, 1, 97, 1, 0, 0, 0, 8, 102, 1, 9, 9, 9, 9})
	f.Add(int64(0), []byte{11, 2, 255, 255, 255, 255, 3, 0, 0, 0, 9, 0, 0, 0, 7, 0, 2})
	f.Add(int64(-5), []byte{0, 3, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 4, 99, 0, 5, 0, 0, 0, 66, 0, 1, 0, 0, 0, 40, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, now int64, data []byte) { checkDecide(t, now, data) })
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
		if checkDecide(t, t0+r.Int64N(1000), data) {
			retried++
		}
	}
	t.Logf("%d of 20000 random plans exercised the retry check", retried)
	if retried < 1000 {
		t.Fatalf("only %d of 20000 random plans exercised the retry check, want at least 1000", retried)
	}
}

// checkDecide runs the checks of FuzzDecide and reports whether the retry
// check ran.
func checkDecide(t *testing.T, now int64, data []byte) bool {
	t.Helper()
	{
		c := decodeCase(data, now)
		before := append([]State(nil), c.states...)
		states := append([]State(nil), c.states...)
		dec := cascade.Decide(&c.p, c.slot, states, now)

		admitted, oks, final := model(c, now)
		if dec.Admitted != admitted || len(dec.Statuses) != len(c.p.Debits) {
			t.Fatalf("Decide(%s) = %s, want admitted %t", describe(&c.p, c.slot), format(dec), admitted)
		}
		for k, s := range states {
			i := firstDebit(c.slot, k)
			if i < 0 {
				if s != before[k] {
					t.Fatalf("slot %d without debits changed: %+v → %+v", k, before[k], s)
				}
				continue
			}
			l := c.p.Debits[i].Bucket
			if s.Tokens != final[k] {
				t.Fatalf("Decide(%s) = %s: slot %d from %+v holds %d, model %d", describe(&c.p, c.slot), format(dec), k, before[k], s.Tokens, final[k])
			}
			if s.Tokens > l.Capacity || s.Tokens < tokenbucket.MinMillitokens {
				t.Fatalf("slot %d: %d outside [MinMillitokens, %d]", k, s.Tokens, l.Capacity)
			}
			r := l.Refill(before[k], now)
			if s.LastRefill < r.LastRefill || s.LastRefill > max(r.LastRefill, now) {
				t.Fatalf("slot %d: LastRefill %d outside [%d, %d]", k, s.LastRefill, r.LastRefill, max(r.LastRefill, now))
			}
		}
		for i, st := range dec.Statuses {
			k := c.slot[i]
			l := c.p.Debits[i].Bucket
			if st.OK != oks[i] {
				t.Fatalf("Decide(%s): status %d OK = %t, model %t", describe(&c.p, c.slot), i, st.OK, oks[i])
			}
			if st.Remaining != states[k].Tokens {
				t.Fatalf("status %d Remaining = %d, want slot %d's %d", i, st.Remaining, k, states[k].Tokens)
			}
			if want := l.TimeToFull(states[k], now); st.ResetAfter != want {
				t.Fatalf("status %d ResetAfter = %v, want %v", i, st.ResetAfter, want)
			}
			if st.RetryAfter < 0 || (st.OK && st.RetryAfter != 0) {
				t.Fatalf("status %d (OK %t) RetryAfter = %v", i, st.OK, st.RetryAfter)
			}
		}
		if dec.Admitted || !retryable(c) {
			return false
		}
		var wait time.Duration
		for _, st := range dec.Statuses {
			wait = max(wait, st.RetryAfter)
		}
		if wait == time.Duration(math.MaxInt64) || now > math.MaxInt64-wait.Milliseconds() {
			return false
		}
		later := now + wait.Milliseconds()
		if again := cascade.Decide(&c.p, c.slot, append([]State(nil), states...), later); !again.Admitted {
			t.Fatalf("Decide(%s) at %d = %s; retried after %v at %d = %s, want admitted",
				describe(&c.p, c.slot), now, format(dec), wait, later, format(again))
		}
		return true
	}
}

// retryable reports whether c is a plan of enforced consumes and checks whose
// every bucket can hold what the plan asks of it, with stored clocks not
// ahead of now (so that waiting is what refills).
func retryable(c fuzzCase) bool {
	for k := range c.states {
		var before, most Millitokens
		for i, d := range c.p.Debits {
			if d.Role != cascade.Enforce || (d.Op != cascade.Consume && d.Op != cascade.Check) {
				return false
			}
			if c.slot[i] != k {
				continue
			}
			need := Millitokens(1)
			if d.Op == cascade.Consume {
				need = max(d.Amount, 0)
			}
			if before+need < before { // overflow
				return false
			}
			most = max(most, before+need)
			if d.Op == cascade.Consume {
				before += max(d.Amount, 0)
			}
			if before > d.Bucket.Capacity || most > d.Bucket.Capacity {
				return false
			}
		}
	}
	return true
}
