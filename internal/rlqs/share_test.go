package rlqs

import (
	"context"
	"math"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/dynalimit/dynalimit/internal/service"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/descriptors"
)

func TestTokenRate(t *testing.T) {
	for _, c := range []struct {
		rate, burst float64
		want        grant
	}{
		{100, 100, grant{100, 100, time.Second}},
		{75, 50, grant{75, 75, time.Second}},
		{2.5, 0, grant{5, 5, 2 * time.Second}},
		{100.0 / 3, 0, grant{67, 67, 2 * time.Second}},
		{0.1, 0, grant{1, 1, 10 * time.Second}},
		{0, 0, grant{1, 1, 5 * time.Second}},
		{math.NaN(), 0, grant{1, 1, 5 * time.Second}},
	} {
		if got := tokenRate(c.rate, c.burst); got != c.want {
			t.Errorf("tokenRate(%v, %v) = %+v, want %+v", c.rate, c.burst, got, c.want)
		}
	}
}

func TestFraction(t *testing.T) {
	for _, c := range []struct {
		d    demand
		want float64
	}{
		{demand{own: -1, streams: 4}, 0.25},            // provisional
		{demand{own: 0, local: 0, streams: 2}, 0.5},    // nobody demands
		{demand{own: 0, local: 10, streams: 2}, 0},     // idle gives back
		{demand{own: 30, local: 40, streams: 2}, 0.75}, // local only
		{demand{own: 30, local: 40, fleet: 60}, 0.5},   // the fleet's
		{demand{own: 30, local: 40, fleet: 20}, 0.75},  // a meter behind
		{demand{own: 50, local: 40, fleet: 0}, 1},      // never past 1
	} {
		if got := fraction(c.d); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("fraction(%+v) = %v, want %v", c.d, got, c.want)
		}
	}
}

// envoy stands for one Envoy's rate_limit_quota filter on one stream: it
// admits what its assignment allows of its demand and reports every 5 s.
type envoy struct {
	st      *streamState
	bucket  map[string]string
	rate    float64 // tokens per second assigned
	started bool
}

const interval = 5 * time.Second

// step reports one interval of demand (requests per second) and takes
// the answer; it returns the requests admitted.
func (e *envoy) step(t *testing.T, domain string, demandRate float64) float64 {
	t.Helper()
	var u *usage
	admitted := 0.0
	if !e.started {
		e.started = true
		u = &usage{BucketId: &rlqspb.BucketId{Bucket: e.bucket}, NumRequestsAllowed: 1, TimeElapsed: durationpb.New(0)}
	} else {
		dem := demandRate * interval.Seconds()
		admitted = math.Min(dem, e.rate*interval.Seconds())
		u = &usage{BucketId: &rlqspb.BucketId{Bucket: e.bucket}, NumRequestsAllowed: uint64(math.Round(admitted)), NumRequestsDenied: uint64(math.Round(dem - admitted)), TimeElapsed: durationpb.New(interval)}
	}
	// Assignments pushed since the last report apply from here (the
	// admissions above used the one in force over the interval).
	pushed := e.st.outbox.take()
	resp, err := e.st.handle(context.Background(), &reports{Domain: domain, BucketQuotaUsages: []*usage{u}})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range append(pushed, resp.GetBucketAction()...) {
		if tb := a.GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket(); tb != nil {
			e.rate = float64(tb.GetTokensPerFill().GetValue()) / tb.GetFillInterval().AsDuration().Seconds()
		}
	}
	return admitted
}

// TestFairShareAcrossReplicas: three Envoys on two replicas sharing one
// store and one bucket of 100/s, demand 3:1:0 then 1:1:1. After two
// report intervals each Envoy's rate is within 10% of its share of the
// demand (an idle one keeps a trickle), and the fleet admits the limit
// within 5%; the same once a stream moves to a restarted replica.
func TestFairShareAcrossReplicas(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r1 := newRig(t, testYAML, Options{})
		r2 := &rig{store: r1.store, cfg: r1.cfg, svc: r1.svc, obs: &countObserver{}}
		r2.srv = New(Options{Config: r1.srv.o.Config, Charger: r1.svc, Observer: r2.obs})
		bucket := tenant("a", "/x")
		envoys := []*envoy{
			{st: r1.srv.newStream(), bucket: bucket},
			{st: r2.srv.newStream(), bucket: bucket},
			{st: r2.srv.newStream(), bucket: bucket},
		}
		run := func(demands []float64, rounds int) (rates []float64, admitted float64) {
			for round := range rounds {
				total := 0.0
				for i, e := range envoys {
					total += e.step(t, "edge", demands[i])
					time.Sleep(interval / time.Duration(len(envoys)))
				}
				t.Logf("round %d: %.1f %.1f %.1f admitted %.0f", round, envoys[0].rate, envoys[1].rate, envoys[2].rate, total)
				if round >= 3 { // after the first two report intervals
					admitted += total
				}
			}
			for _, e := range envoys {
				rates = append(rates, e.rate)
			}
			return rates, admitted / float64(rounds-3) / interval.Seconds()
		}
		rates, fleet := run([]float64{300, 100, 0}, 7)
		t.Logf("3:1:0 → %.1f %.1f %.1f /s, admitted %.1f/s", rates[0], rates[1], rates[2], fleet)
		within(t, "3:1:0 first", rates[0], 75, 0.1)
		within(t, "3:1:0 second", rates[1], 25, 0.1)
		if rates[2] > 1 {
			t.Errorf("idle Envoy keeps %.1f/s, want a trickle", rates[2])
		}
		within(t, "3:1:0 fleet", fleet, 100, 0.05)
		rates, fleet = run([]float64{100, 100, 100}, 7)
		t.Logf("1:1:1 → %.1f %.1f %.1f /s, admitted %.1f/s", rates[0], rates[1], rates[2], fleet)
		for i := range rates {
			within(t, "1:1:1", rates[i], 100.0/3, 0.1)
		}
		within(t, "1:1:1 fleet", fleet, 100, 0.05)

		// Replica 1 restarts: its Envoy's stream moves to a new replica
		// (a new Server on the same store), which knows nothing of it.
		r3 := New(Options{Config: r1.srv.o.Config, Charger: r1.svc})
		envoys[0].st.close(context.Background())
		envoys[0] = &envoy{st: r3.newStream(), bucket: bucket, rate: envoys[0].rate, started: true}
		rates, fleet = run([]float64{200, 100, 100}, 7)
		t.Logf("after the move, 2:1:1 → %.1f %.1f %.1f /s, admitted %.1f/s", rates[0], rates[1], rates[2], fleet)
		within(t, "moved", rates[0], 50, 0.1)
		within(t, "stayed", rates[1], 25, 0.1)
		within(t, "moved fleet", fleet, 100, 0.05)
		for _, e := range envoys {
			e.st.close(context.Background())
		}
	})
}

func within(t *testing.T, what string, got, want, tol float64) {
	t.Helper()
	if math.Abs(got-want) > tol*want {
		t.Errorf("%s: %.2f, want %.2f ±%.0f%%", what, got, want, tol*100)
	}
}

// TestTTLAndAbandon: assignments live DefaultTTL; a bucket that reports
// no demand for AbandonAfter is abandoned at its first report past it,
// and its next report subscribes it again.
func TestTTLAndAbandon(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, testYAML, Options{AbandonAfter: 20 * time.Second})
		st := r.srv.newStream()
		b := tenant("a", "/x")
		send := func(allowed uint64, elapsed time.Duration) *action {
			t.Helper()
			resp, err := st.handle(context.Background(), report("edge", b, allowed, 0, elapsed))
			if err != nil {
				t.Fatal(err)
			}
			return resp.GetBucketAction()[0]
		}
		a := send(1, 0)
		if ttl := a.GetQuotaAssignmentAction().GetAssignmentTimeToLive().AsDuration(); ttl != 15*time.Second {
			t.Errorf("ttl %v", ttl)
		}
		for i := 1; i <= 4; i++ { // 5, 10, 15, 20 s without demand
			time.Sleep(interval)
			a = send(0, interval)
			if abandoned := a.GetAbandonAction() != nil; abandoned != (i == 4) {
				t.Fatalf("report %d (%v idle): abandoned %v", i, time.Duration(i)*interval, abandoned)
			}
		}
		if len(st.watches) != 0 || r.obs.gauges()[1] != 0 {
			t.Errorf("abandoned bucket still watched: %d", len(st.watches))
		}
		time.Sleep(time.Second)
		if a = send(1, 0); a.GetQuotaAssignmentAction() == nil {
			t.Errorf("resubscription answered %v", a)
		}
		st.close(context.Background())
	})
}

// TestSharesLeaveRoomForRLS: ShouldRateLimit decisions on the same
// descriptor consume the limit too; the quota shares shrink by what they
// take, so that both together admit the limit.
func TestSharesLeaveRoomForRLS(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, testYAML, Options{})
		e := &envoy{st: r.srv.newStream(), bucket: tenant("a", "/x")}
		req := &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{{
			Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: "a"}, {Key: "path", Value: "/x"}},
		}}}
		var quota, rls float64
		for round := range 10 {
			q := e.step(t, "edge", 300)
			ok := 0
			for range 100 { // 20 a second
				time.Sleep(50 * time.Millisecond)
				resp, err := r.svc.ShouldRateLimit(context.Background(), req)
				if err != nil {
					t.Fatal(err)
				}
				if resp.GetOverallCode() == rlspb.RateLimitResponse_OK {
					ok++
				}
			}
			if round >= 4 {
				quota += q
				rls += float64(ok)
			}
		}
		secs := 6 * interval.Seconds()
		t.Logf("quota %.1f/s, RLS %.1f/s, together %.1f/s; last share %.1f/s", quota/secs, rls/secs, (quota+rls)/secs, e.rate)
		within(t, "together", (quota+rls)/secs, 100, 0.05)
		e.st.close(context.Background())
	})
}

// countingStore counts the store calls: writes (a plan that charges,
// refunds or consumes) and reads (checks only).
type countingStore struct {
	service.Store
	writes, reads atomic.Int64
}

func (s *countingStore) Acquire(ctx context.Context, p *cascade.Plan) (cascade.Decision, error) {
	n := &s.reads
	for _, d := range p.Debits {
		if d.Op != cascade.Check {
			n = &s.writes
			break
		}
	}
	n.Add(1)
	return s.Store.Acquire(ctx, p)
}

// TestStoreCallsPerSlot: a replica writes each bucket once a report
// slot, however many of its streams report it and whatever the request
// rate: 3 Envoys on one replica, 2 buckets, 6 reports each, at 10 and at
// 10,000 requests a second: one write per bucket per slot (the first at
// the bucket's first report, to learn its limits), and one per bucket
// when the last stream leaves; reads at most one a report.
func TestStoreCallsPerSlot(t *testing.T) {
	for _, rate := range []float64{10, 10_000} {
		synctest.Test(t, func(t *testing.T) {
			r := newRig(t, testYAML, Options{})
			st := &countingStore{Store: r.store}
			svc := service.New(st, func() *descriptors.Config { return r.cfg })
			srv := New(Options{Config: func() *descriptors.Config { return r.cfg }, Charger: svc})
			var envoys []*envoy
			var streams []*streamState
			for range 3 {
				s := srv.newStream()
				streams = append(streams, s)
				envoys = append(envoys, &envoy{st: s, bucket: tenant("a", "/x")}, &envoy{st: s, bucket: tenant("b", "/y")})
			}
			start := time.Now()
			for range 6 {
				for _, e := range envoys {
					e.step(t, "edge", rate)
				}
				time.Sleep(interval)
			}
			slots := slotOf(time.Now()) - slotOf(start)
			for _, s := range streams {
				s.close(context.Background())
			}
			// The first reports charge the first slot; the last slot has
			// not come to its charge yet when the streams leave.
			if got, want := st.writes.Load(), 2*slots+2; got != want {
				t.Errorf("%v requests/s: %d store writes, want %d (2 buckets: one per slot in %d slots, one at leaving)", rate, got, want, slots)
			}
			// Reports answered more than a second after the bucket's
			// last call read it anew: at most one a report.
			if got := st.reads.Load(); got > 3*2*6 {
				t.Errorf("%v requests/s: %d store reads, want at most %d (one a report)", rate, got, 3*2*6)
			}
		})
	}
}
