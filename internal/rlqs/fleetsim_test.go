//go:build rlqsfleetsim

// The fleet simulation: TestRLQSFleet's rig (three Envoys 1.40 on two
// replicas, one limit of 100/s, demand 3:1:0, then 1:1:1, then 2:1:1)
// with simulated Envoys and a store of a given latency, in a synctest
// bubble, so that the timing of the Envoys' reports against the
// replicas' report slots is set rather than drawn. It is behind a build
// tag because TestFleetSimSlotBeforeReports fails: it reproduces the
// windows that failed TestRLQSFleet (docs/rlqs.md, what it does not do).
//
//	go test -tags rlqsfleetsim -run TestFleetSim -v ./internal/rlqs

package rlqs

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/dynalimit/dynalimit/internal/service"
	"github.com/dynalimit/dynalimit/pkg/descriptors"
	"github.com/sirupsen/logrus"
)

// slowCharger is a store that takes before to receive a call and after to
// answer it: a remote store's latency.
type slowCharger struct {
	Charger
	before, after func() time.Duration
}

func (c *slowCharger) ChargeQuota(ctx context.Context, domain string, entries []descriptors.Entry, q service.QuotaCharge) (service.Quota, error) {
	time.Sleep(c.before())
	r, err := c.Charger.ChargeQuota(ctx, domain, entries, q)
	time.Sleep(c.after())
	return r, err
}

// simEnvoy is one Envoy's rate_limit_quota filter as Envoy 1.40 runs it:
// a token bucket it refills itself, a report every 5 s from its bucket's
// first request on (time_elapsed in whole seconds), assignments applied as
// they come, answers and pushes alike; ALLOW_ALL until the first.
type simEnvoy struct {
	st     *streamState
	bucket map[string]string

	assigned      bool
	g             grant
	tokens        float64
	lastFill      time.Time
	allowed, deny uint64
	lastReport    time.Time
}

func (e *simEnvoy) apply(as []*action, now time.Time) {
	for _, a := range as {
		tb := a.GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket()
		if tb == nil {
			continue
		}
		g := grant{maxTokens: tb.GetMaxTokens(), tokensPerFill: tb.GetTokensPerFill().GetValue(), fillInterval: tb.GetFillInterval().AsDuration()}
		if !e.assigned {
			e.tokens, e.lastFill = float64(g.maxTokens), now
		} else if g != e.g {
			e.tokens = math.Floor(e.tokens * float64(g.maxTokens) / float64(e.g.maxTokens))
		}
		e.assigned, e.g = true, g
	}
}

// admit decides one request at now.
func (e *simEnvoy) admit(now time.Time) bool {
	if !e.assigned {
		return true
	}
	for now.Sub(e.lastFill) >= e.g.fillInterval {
		e.lastFill = e.lastFill.Add(e.g.fillInterval)
		e.tokens = math.Min(e.tokens+float64(e.g.tokensPerFill), float64(e.g.maxTokens))
	}
	if e.tokens >= 1 {
		e.tokens--
		return true
	}
	return false
}

func (e *simEnvoy) report(t *testing.T, now time.Time, first bool) {
	u := &usage{BucketId: &rlqspb.BucketId{Bucket: e.bucket}, NumRequestsAllowed: e.allowed, NumRequestsDenied: e.deny}
	if first {
		u.TimeElapsed = durationpb.New(0)
	} else {
		u.TimeElapsed = durationpb.New(now.Sub(e.lastReport).Truncate(time.Second))
	}
	e.allowed, e.deny, e.lastReport = 0, 0, now
	resp, err := e.st.handle(context.Background(), &reports{Domain: "edge", BucketQuotaUsages: []*usage{u}})
	if err != nil {
		t.Error(err)
		return
	}
	e.apply(resp.GetBucketAction(), time.Now())
}

// simPhase is one demand phase of a fleet simulation.
type simPhase struct {
	demand [3]float64
	length time.Duration
}

// simFleet runs three simulated Envoys, the first on replica a, the others
// on replica b, through phases, starting their first requests at start
// (from the bubble's epoch, slot-aligned), each Envoy's requests spacing
// after the last one's; it returns each Envoy's admitted requests per
// second of each phase.
func simFleet(t *testing.T, a, b *Server, start, spacing time.Duration, phases []simPhase) [][3][]int {
	time.Sleep(start)
	servers := []*Server{a, b, b}
	envoys := make([]*simEnvoy, 3)
	for i := range envoys {
		envoys[i] = &simEnvoy{st: servers[i].newStream(), bucket: tenant("a", "/x")}
	}
	out := make([][3][]int, len(phases))
	var total time.Duration
	for k, p := range phases {
		for i := range out[k] {
			out[k][i] = make([]int, int(p.length/time.Second))
		}
		total += p.length
	}
	const step = 10 * time.Millisecond
	t0 := time.Now()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, e := range envoys {
		wg.Go(func() {
			time.Sleep(time.Duration(i) * spacing)
			owed := 0.0
			for {
				now := time.Now()
				at := now.Sub(t0)
				if at >= total {
					return
				}
				k := 0
				for ; at >= phases[k].length; k++ {
					at -= phases[k].length
				}
				e.apply(e.st.outbox.take(), now)
				owed += phases[k].demand[i] * step.Seconds()
				for ; owed >= 1; owed-- {
					if e.lastReport.IsZero() {
						e.report(t, now, true)
					}
					if e.admit(now) {
						e.allowed++
						mu.Lock()
						out[k][i][int(at/time.Second)]++
						mu.Unlock()
					} else {
						e.deny++
					}
				}
				if !e.lastReport.IsZero() && now.Sub(e.lastReport) >= interval {
					e.report(t, now, false)
				}
				time.Sleep(step)
			}
		})
	}
	wg.Wait()
	for _, e := range envoys {
		e.st.close(context.Background())
	}
	return out
}

// fleetPhases are TestRLQSFleet's phases, without the restart.
var fleetPhases = []simPhase{
	{[3]float64{300, 100, 0}, 20 * time.Second},
	{[3]float64{100, 100, 100}, 20 * time.Second},
	{[3]float64{200, 100, 100}, 20 * time.Second},
}

// simWindows are each phase's admitted requests a second in its window
// from 10 to 20 s, as TestRLQSFleet checks them, and each Envoy's count.
func simWindows(out [][3][]int) ([]float64, [][3]int) {
	var rates []float64
	var per [][3]int
	for _, bins := range out {
		var p [3]int
		sum := 0
		for i := range bins {
			for s := 10; s < 20; s++ {
				p[i] += bins[i][s]
				sum += bins[i][s]
			}
		}
		rates, per = append(rates, float64(sum)/10), append(per, p)
	}
	return rates, per
}

// debugLogger logs at debug level to stdout when RLQS_SIM_DEBUG is set,
// with the bubble's time.
func debugLogger(name string) *logrus.Entry {
	l := logrus.New()
	l.SetOutput(io.Discard)
	if os.Getenv("RLQS_SIM_DEBUG") != "" {
		l.SetLevel(logrus.DebugLevel)
		l.SetOutput(os.Stdout)
		l.AddHook(bubbleTime{})
		l.SetFormatter(&logrus.TextFormatter{DisableTimestamp: true})
	}
	return l.WithField("replica", name)
}

type bubbleTime struct{}

func (bubbleTime) Levels() []logrus.Level { return logrus.AllLevels }
func (bubbleTime) Fire(e *logrus.Entry) error {
	e.Data["at"] = time.Now().UTC().Format("04:05.000")
	return nil
}

// runFleetSim runs the fleet with the replicas' slot offsets, the
// Envoys' first requests start after the bubble's (slot-aligned) epoch,
// and a store that takes latency to apply a call.
func runFleetSim(t *testing.T, offsets [2]time.Duration, start, spacing, latency time.Duration) ([]float64, [][3]int) {
	var rates []float64
	var per [][3]int
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, testYAML, Options{})
		ch := &slowCharger{Charger: r.svc, before: func() time.Duration { return latency }, after: func() time.Duration { return 0 }}
		a := New(Options{Config: r.srv.o.Config, Charger: ch, Logger: debugLogger("A")})
		b := New(Options{Config: r.srv.o.Config, Charger: ch, Logger: debugLogger("B")})
		a.pool.offset, b.pool.offset = offsets[0], offsets[1]
		rates, per = simWindows(simFleet(t, a, b, start, spacing, fleetPhases))
	})
	return rates, per
}

// TestFleetSimSlotBeforeReports: the Envoys report 4.5 s into each
// report slot, after both replicas' slot charges (3.778 and 4.033 s in),
// the store answers in 1 ms. Each window from 10 s after a change must
// admit the limit within 5%. It fails today: the 3:1:0 window admits
// 112.1/s and the 1:1:1 window 88.9/s, TestRLQSFleet's failure. The
// first replica's reports come 0.7 s after its own slot charge, within
// freshWithin, so they are answered from that charge's reading, taken
// before the second replica's charge wrote its demand; its next reading
// is its next slot charge, 5 s on, again before the other's. Its Envoy
// keeps all of the limit for 14 s of the phase; the debt it leaves is
// repaid in the next phase, under the limit.
func TestFleetSimSlotBeforeReports(t *testing.T) {
	ms := time.Millisecond
	rates, per := runFleetSim(t, [2]time.Duration{3778 * ms, 4033 * ms}, 4500*ms, 0, ms)
	for k, r := range rates {
		t.Logf("phase %d, 10–20 s: %v, %.1f/s", k, per[k], r)
		if r < 95 || r > 105 {
			t.Errorf("phase %d, 10–20 s: %.1f/s, want 100 ±5%%", k, r)
		}
	}
}

// TestFleetSimSweep runs the fleet over a grid of store latencies, report
// spacings, slot offsets and report phases, and prints each run's windows
// (FAIL past ±5%) and how many failed.
func TestFleetSimSweep(t *testing.T) {
	ms := func(v int) time.Duration { return time.Duration(v) * time.Millisecond }
	bad, runs := 0, 0
	for _, lat := range []int{1, 6, 20, 60, 200} {
		for _, spacing := range []int{0, 5, 20} {
			for _, off := range [][2]int{{3778, 4033}, {4400, 3100}, {3000, 4500}} {
				for start := 0; start < 10000; start += 500 {
					rates, per := runFleetSim(t, [2]time.Duration{ms(off[0]), ms(off[1])}, ms(start), ms(spacing), ms(lat))
					line := fmt.Sprintf("latency %3d ms, spacing %2d ms, offsets %v ms, start %5d ms:", lat, spacing, off, start)
					fail := false
					for k, r := range rates {
						fail = fail || r < 95 || r > 105
						line += fmt.Sprintf(" %v %.1f/s", per[k], r)
					}
					runs++
					if fail {
						bad++
						line += " FAIL"
					}
					fmt.Println(line)
				}
			}
		}
	}
	t.Logf("%d of %d runs had a window past ±5%%", bad, runs)
}
