package dynamo_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// Clocks across replicas.
//
// Each replica decides on its own clock. An admission by a replica reading
// c on its clock leaves a level X ≤ c·ra (the bucket held a token at c), and
// the level a run of admissions starts from is at least c₀·ra − C·rp (full
// at the first one's clock c₀; a clamp later in the run only raises it).
// Levels only grow between them, by rp per millitoken admitted, so the
// admissions i..j of one bucket, in the order DynamoDB applied them, are at
// most
//
//	C + r·(c_j − c_i) ≤ C + r·((t_j − t_i) + skew)
//
// tokens, where c are the deciding replicas' clocks, t real time, r =
// ra/rp the rate, and skew the largest difference between two replicas'
// clocks. The excess over a single clock is r·(o_j − o_i), the offset of
// the last admitting replica less the first's: positive only when a
// replica ahead admits after one behind (the one behind drained a full
// bucket to a level its own clock calls empty, the one ahead sees skew·r
// more refill); when the replica behind writes after the one ahead, it
// sees less refill than real time gives and the fleet admits less. The
// excess does not accrue: over any interval, however long, it is at most
// skew·r, and the long-run rate is the limit's. It recurs, relative to one
// exact bucket under the same traffic, each time the bucket is full again.

// skewedFleet is two replicas of the store on one fake table, whose clocks
// read real time plus their offsets.
type skewedFleet struct {
	stores  [2]*dynamo.Store
	clocks  [2]*clock
	offsets [2]int64 // ms
	obs     [2]*countingObserver
	logs    [2]*logtest.Hook
	nowMs   int64 // real time
}

func newSkewedFleet(t *testing.T, offsetA, offsetB int64) *skewedFleet {
	t.Helper()
	return newSkewedFleetOn(t, fakeTable(t), "t", offsetA, offsetB)
}

// newSkewedFleetOn is newSkewedFleet on a table of api.
func newSkewedFleetOn(t *testing.T, api dynamo.API, table string, offsetA, offsetB int64) *skewedFleet {
	t.Helper()
	fl := &skewedFleet{offsets: [2]int64{offsetA, offsetB}, nowMs: 1_700_000_000_000}
	for i := range fl.stores {
		fl.clocks[i] = newClock()
		fl.obs[i] = &countingObserver{}
		log, hook := logtest.NewNullLogger()
		fl.logs[i] = hook
		fl.stores[i] = newStore(t, api, table, fl.clocks[i], dynamo.WithObserver(fl.obs[i]), dynamo.WithLogger(logrus.NewEntry(log)))
	}
	fl.advance(0)
	return fl
}

// advance moves real time on by ms and every replica's clock with it.
func (fl *skewedFleet) advance(ms int64) {
	fl.nowMs += ms
	for i, c := range fl.clocks {
		c.Set(fl.nowMs + fl.offsets[i])
	}
}

// acquire asks replica r for one token of l now.
func (fl *skewedFleet) acquire(t *testing.T, r int, l tokenbucket.Limit) bool {
	t.Helper()
	key := cascade.Key{Namespace: "skew", Entity: "tenant", Resource: "api"}
	p := &cascade.Plan{Debits: []cascade.Debit{{Key: key, Limit: "l", Bucket: l, Amount: tokenbucket.PerToken}}}
	dec, err := fl.stores[r].Acquire(context.Background(), p)
	if err != nil {
		t.Fatalf("replica %d: Acquire() at %d ms = %v", r, fl.nowMs, err)
	}
	return dec.Admitted
}

// request is one call of the simulated traffic: after gapMs of real time,
// replica asks for one token.
type request struct {
	gapMs   int64
	replica int
}

// admission is an admitted request: real time and the decider's clock.
type admission struct{ realMs, clockMs int64 }

// run drives traffic through the fleet and returns its decisions and its
// admissions.
func (fl *skewedFleet) run(t *testing.T, l tokenbucket.Limit, traffic []request) ([]bool, []admission) {
	t.Helper()
	got := make([]bool, len(traffic))
	var adm []admission
	for i, rq := range traffic {
		fl.advance(rq.gapMs)
		if got[i] = fl.acquire(t, rq.replica, l); got[i] {
			adm = append(adm, admission{fl.nowMs, fl.nowMs + fl.offsets[rq.replica]})
		}
	}
	return got, adm
}

// exact returns the decisions of one bucket on the real clock under the
// same traffic: what the fleet admits when every clock is right.
func exact(l tokenbucket.Limit, startMs int64, traffic []request) []bool {
	st := l.Full(startMs)
	now := startMs
	out := make([]bool, len(traffic))
	for i, rq := range traffic {
		now += rq.gapMs
		lv := tokenbucket.Stored(st)
		out[i] = l.TryConsume(&lv, tokenbucket.PerToken, now)
		st = lv.State()
	}
	return out
}

func count(bs []bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

// worst checks the bound over every run of consecutive admissions i..j —
// (j−i+1) tokens ≤ C + r·(c_j − c_i) on the deciders' clocks, hence ≤ C +
// r·(t_j − t_i + skew) — and returns the largest excess over a single
// clock's C + r·(t_j − t_i), in tokens, with the run that reached it.
//
// In millitoken·ms, with K = 1000·rp, the first reads u_j + K ≤ C·rp + u_i
// for u_k = k·K − ra·c_k: each j is checked against the least u_i before
// it, and likewise the others, in one pass.
func worst(t *testing.T, l tokenbucket.Limit, skewMs int64, adm []admission) (excess float64, from, to int) {
	t.Helper()
	c, ra, rp := int64(l.Capacity), int64(l.RefillAmount), l.RefillPeriod.Milliseconds()
	k := int64(tokenbucket.PerToken) * rp
	excess = math.Inf(-1)
	var minU, minV int64 // the least u_i and v_i (v on the real clock) so far
	argU, argV := 0, 0
	for j, a := range adm {
		u, v := int64(j)*k-ra*a.clockMs, int64(j)*k-ra*a.realMs
		if j == 0 || u < minU {
			minU, argU = u, j
		}
		if j == 0 || v < minV {
			minV, argV = v, j
		}
		if u+k > c*rp+minU {
			i := argU
			t.Fatalf("admissions %d..%d: %d tokens in %d ms, deciders' clocks %d ms apart, want at most C + r·(c_j − c_i) = %.3f",
				i, j, j-i+1, a.realMs-adm[i].realMs, a.clockMs-adm[i].clockMs, float64(c*rp+ra*(a.clockMs-adm[i].clockMs))/float64(k))
		}
		if v+k > c*rp+ra*skewMs+minV {
			i := argV
			t.Fatalf("admissions %d..%d: %d tokens in %d ms, want at most C + r·(Δt + skew %d ms) = %.3f",
				i, j, j-i+1, a.realMs-adm[i].realMs, skewMs, float64(c*rp+ra*(a.realMs-adm[i].realMs+skewMs))/float64(k))
		}
		if e := float64(v-minV+k-c*rp) / float64(k); e > excess {
			excess, from, to = e, argV, j
		}
	}
	return excess, from, to
}

// TestClockSkewBound runs two replicas whose clocks are 50 ms apart on one
// bucket at several limits, in the worst order: a full bucket is drained
// by a burst on the replica behind, then the replica ahead asks as much;
// then both ask in turn (behind first) at twice the rate for a while; the
// bucket sits idle until it is full again, and it all happens once more.
// It wants every run of admissions within C + r·(Δt + 50 ms) and the
// excess over a single clock within r·skew, and logs the figures: admitted
// by the fleet, by one exact bucket under the same traffic, and the
// largest excess over any interval.
func TestClockSkewBound(t *testing.T) {
	const skew = 50 // ms
	cases := []struct {
		name   string
		n      uint64
		per    time.Duration
		burst  uint64
		gapMs  int64 // between the turns of the steady phase
		steady int   // turns in the steady phase
	}{
		{"10/s", 10, time.Second, 0, 50, 100},
		{"10/s burst 50", 10, time.Second, 50, 50, 100},
		{"1000/s", 1000, time.Second, 0, 1, 2000},
		{"1000/s burst 5000", 1000, time.Second, 5000, 1, 2000},
		{"100/min", 100, time.Minute, 0, 300, 500},
		{"100/min burst 300", 100, time.Minute, 300, 300, 500},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := mustLimit(t, tc.n, tc.per, tc.burst)
			capacity := int(l.Capacity / tokenbucket.PerToken)
			skewTokens := int(int64(l.RefillAmount)*skew/l.RefillPeriod.Milliseconds()/int64(tokenbucket.PerToken)) + 1
			// Refill from empty takes C/r; the idle stretch is that and the
			// skew, so the bucket is full again on both clocks.
			idle := int64(l.Capacity)*l.RefillPeriod.Milliseconds()/int64(l.RefillAmount) + skew
			var traffic []request
			for round := range 2 {
				gap := idle
				if round == 0 {
					gap = 0
				}
				for range capacity + 5 {
					traffic = append(traffic, request{gap, 1}) // behind drains
					gap = 0
				}
				for range skewTokens + 5 {
					traffic = append(traffic, request{0, 0}) // ahead finds more
				}
				for range tc.steady {
					traffic = append(traffic, request{tc.gapMs, 1}, request{0, 0})
				}
			}
			fl := newSkewedFleet(t, skew, 0)
			start := fl.nowMs
			got, adm := fl.run(t, l, traffic)
			want := exact(l, start, traffic)
			excess, i, j := worst(t, l, skew, adm)
			span := fl.nowMs - start
			limit := float64(l.Capacity)/1000 + float64(l.RefillAmount)/1000*float64(span)/float64(l.RefillPeriod.Milliseconds())
			rs := float64(l.RefillAmount) / 1000 * skew / float64(l.RefillPeriod.Milliseconds())
			t.Logf("%s, skew %d ms, %d requests over %.1f s: fleet admitted %d, one exact bucket %d (C + r·T = %.1f, bound C + r·(T + skew) = %.1f); largest excess over any interval %.2f tokens (admissions %d..%d), r·skew = %.2f",
				tc.name, skew, len(traffic), float64(span)/1000, count(got), count(want), limit, limit+rs, excess, i, j, rs)
			if excess > rs {
				t.Errorf("largest excess %.3f tokens, want at most r·skew = %.3f", excess, rs)
			}
			if extra := count(got) - count(want); float64(extra) > 2*rs+2 {
				t.Errorf("fleet admitted %d more than one exact bucket, want at most 2·⌈r·skew⌉ (two fills)", extra)
			}
		})
	}
}

// TestClockSkewProperty draws skews, limits and traffic (gaps from 0 to
// several refill times, either replica) and wants every run of admissions
// within the bound; with the same traffic and equal clocks, the fleet
// decides exactly as one bucket: exact at any call rate.
func TestClockSkewProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	cases := 100
	if testing.Short() {
		cases = 40
	}
	for k := range cases {
		skew := rng.Int64N(501)
		n := 1 + rng.Uint64N(2000)
		per := []time.Duration{time.Second, time.Minute, time.Duration(1+rng.IntN(5000)) * time.Millisecond}[rng.IntN(3)]
		burst := []uint64{0, n + rng.Uint64N(3*n+1)}[rng.IntN(2)]
		l := mustLimit(t, n, per, burst)
		meanGap := float64(per.Milliseconds()) / float64(n) // one token's refill
		scale := []float64{0.1, 0.5, 1, 2, 10}[rng.IntN(5)]
		var traffic []request
		for i := range 200 {
			gap := int64(rng.ExpFloat64() * meanGap * scale)
			if i == 0 {
				gap = 0
			}
			if rng.IntN(50) == 0 {
				gap += int64(l.Capacity) * per.Milliseconds() / int64(l.RefillAmount) // refill to full
			}
			traffic = append(traffic, request{gap, rng.IntN(2)})
		}
		name := fmt.Sprintf("%d: %d/%v burst %d, skew %d ms, gaps ×%v", k, n, per, burst, skew, scale)
		t.Run(name, func(t *testing.T) {
			fl := newSkewedFleet(t, skew, 0)
			_, adm := fl.run(t, l, traffic)
			worst(t, l, skew, adm)

			equalClocksExact(t, l, traffic)
		})
	}
}

// equalClocksExact runs traffic through two replicas with equal clocks and
// wants each decision to be the one exact bucket's.
func equalClocksExact(t *testing.T, l tokenbucket.Limit, traffic []request) *skewedFleet {
	t.Helper()
	fl := newSkewedFleet(t, 0, 0)
	start := fl.nowMs
	got, _ := fl.run(t, l, traffic)
	want := exact(l, start, traffic)
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("equal clocks: request %d (replica %d) admitted = %v, want %v as one exact bucket", i, traffic[i].replica, got[i], want[i])
		}
	}
	return fl
}

// TestEqualClocksExact drives two replicas with equal clocks hard on one
// bucket at several limits and wants each decision to be the one exact
// bucket's.
func TestEqualClocksExact(t *testing.T) {
	for _, tc := range []struct {
		n, burst uint64
		per      time.Duration
		gapMs    int64
	}{{10, 0, time.Second, 10}, {1000, 5000, time.Second, 1}, {100, 0, time.Minute, 100}} {
		t.Run(fmt.Sprintf("%d per %v burst %d", tc.n, tc.per, tc.burst), func(t *testing.T) {
			l := mustLimit(t, tc.n, tc.per, tc.burst)
			var traffic []request
			for i := range 2000 {
				traffic = append(traffic, request{tc.gapMs * int64(i%2), i % 2})
			}
			fl := equalClocksExact(t, l, traffic)
			if fl.obs[0].behind.Load() != 0 || fl.obs[1].behind.Load() != 0 {
				t.Errorf("ClockBehind = %v, %v with equal clocks, want 0, 0", time.Duration(fl.obs[0].behind.Load()), time.Duration(fl.obs[1].behind.Load()))
			}
		})
	}
}

// TestClockBehindSignal has two replicas, one 150 ms ahead, write one
// bucket in turn, on the fake and on DynamoDB Local: the replica behind
// reports 150 ms behind (the items it receives were written by a clock
// ahead of its own) and logs one warning a minute; the replica ahead
// reports nothing and logs nothing. Reports cover the last minute: once the
// clocks agree, the next window reports 0.
func TestClockBehindSignal(t *testing.T) {
	const skew = 150
	for _, b := range backends() {
		t.Run(b.Name, func(t *testing.T) {
			api, table := b.API(t)
			fl := newSkewedFleetOn(t, api, table, skew, 0) // replica 0 is ahead
			l := mustLimit(t, 1000, time.Second, 0)
			for range 100 {
				fl.advance(5)
				fl.acquire(t, 0, l)
				fl.acquire(t, 1, l)
			}
			if got := time.Duration(fl.obs[1].behind.Load()); got != skew*time.Millisecond {
				t.Errorf("replica behind: ClockBehind = %v, want %v", got, skew*time.Millisecond)
			}
			if got := time.Duration(fl.obs[0].behind.Load()); got != 0 {
				t.Errorf("replica ahead: ClockBehind = %v, want 0", got)
			}
			if got := warnings(fl.logs[1]); got != 1 {
				t.Errorf("replica behind: %d warnings in half a second, want 1", got)
			} else if ms := fl.logs[1].LastEntry().Data["behind_ms"]; ms != int64(skew) {
				t.Errorf("replica behind: warning with behind_ms = %v, want %d", ms, skew)
			}
			if got := warnings(fl.logs[0]); got != 0 {
				t.Errorf("replica ahead: %d warnings, want 0", got)
			}

			// The clocks agree again: after a minute the report falls back to 0.
			fl.offsets[0] = 0
			fl.advance(0)
			for range 20 {
				fl.advance(5 * 1000)
				fl.acquire(t, 0, l)
				fl.acquire(t, 1, l)
			}
			if got := time.Duration(fl.obs[1].behind.Load()); got != 0 {
				t.Errorf("replica behind, clocks agreed for 100 s: ClockBehind = %v, want 0", got)
			}
			if got := warnings(fl.logs[1]); got != 1 {
				t.Errorf("replica behind, clocks agreed: %d warnings in all, want still 1", got)
			}
		})
	}
}

func warnings(h *logtest.Hook) int {
	n := 0
	for _, e := range h.AllEntries() {
		if e.Level == logrus.WarnLevel {
			n++
		}
	}
	return n
}
