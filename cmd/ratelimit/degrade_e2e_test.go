package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/internal/testutil"
)

// TestFleetHotTenantNewKeysLocal is the fleet on a slow store: three
// replicas on one DynamoDB Local, a tenant of 10/s with a burst of 100,
// and 90 callers each asking with a new API key under it, for 10 s,
// BACKEND_TIMEOUT=200ms, with another process keeping a core busy. Every
// new key costs reads and a write that DynamoDB Local often answers past
// the budget. Under ON_UNAVAILABLE=local those decisions are made on each
// replica's share of the tenant: the fleet admits at most 1.1 × (100 +
// 10·t), and no call fails.
func TestFleetHotTenantNewKeysLocal(t *testing.T) {
	testutil.BusyCore(t)
	f := startFleetWith(t, hierarchyFleetConfig, 3, "BACKEND_TIMEOUT=200ms", "ON_UNAVAILABLE=local")
	f.counted(t)
	var n atomic.Int64
	l := f.driveWith(90, 10*time.Second, func(int) *pb.RateLimitRequest {
		return &pb.RateLimitRequest{Domain: "fleet", Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{
			{Key: "tenant", Value: "acme"}, {Key: "api_key", Value: "new-" + strconv.FormatInt(n.Add(1), 10)},
		}}}}
	}, nil)
	bound := 100 + 10*l.elapsed.Seconds()
	ok := float64(l.ok.Load())
	t.Logf("ON_UNAVAILABLE=local: %d OK, %d OVER_LIMIT, %d errors in %v; allowed %.0f (%.2f×); local decisions %.0f allowed, %.0f refused; repayments %.0f applied, %.0f failed; UpdateItem %.0f",
		l.ok.Load(), l.over.Load(), l.errs.Load(), l.elapsed.Round(time.Millisecond), bound, ok/bound,
		f.metric(t, "ratelimit_local_decisions_total", `decision="allowed"`), f.metric(t, "ratelimit_local_decisions_total", `decision="refused"`),
		f.metric(t, "ratelimit_settle_ups_total", `result="applied"`), f.metric(t, "ratelimit_settle_ups_total", `result="failed"`),
		f.metric(t, "ratelimit_dynamodb_calls_total", `operation="UpdateItem"`))
	if ok > 1.1*bound {
		t.Errorf("%v OK answers, want at most %.0f (1.1 × (100 + 10/s × %v))", ok, 1.1*bound, l.elapsed)
	}
	if e := l.errs.Load(); e > 0 {
		t.Errorf("%d calls failed, want none; first: %v", e, l.firstErr.Load())
	}
	if f.metric(t, "ratelimit_on_unavailable_total") > 0 {
		t.Errorf("%.0f decisions by allow or block, want none under local", f.metric(t, "ratelimit_on_unavailable_total"))
	}
}

// counted waits until every replica of f counts the whole fleet by its
// heartbeats, as in a fleet that has been running for a few seconds.
func (f *fleet) counted(t *testing.T) {
	t.Helper()
	want := float64(len(f.procs) * len(f.procs))
	deadline := time.Now().Add(15 * time.Second)
	for f.metric(t, "ratelimit_fleet_size") != want {
		if time.Now().After(deadline) {
			t.Fatalf("the replicas count %.0f in all after 15 s, want %.0f (each %d)", f.metric(t, "ratelimit_fleet_size"), want, len(f.procs))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// outageConfig is one hot key of 20 a second (burst 20).
const outageConfig = `domain: fleet
descriptors:
  - key: generic_key
    value: hot
    rate_limit:
      unit: second
      requests_per_unit: 20
`

// outageRun is what callers saw in a run with an outage.
type outageRun struct {
	mode                         string
	before, during, after, total int // admitted
	// dead is admitted of the requests sent after DynamoDB Local had
	// exited and answered before it was started again: no write of theirs
	// can have landed. during counts by the answer's time, and so includes
	// answers to writes that landed as the kill began.
	dead             int
	asked            int
	outage, run      time.Duration
	firstSecondAfter int // admitted in the first second after the outage
	errs             int64
	local            float64
}

// TestOutageThreeModes kills DynamoDB Local for 5 s in the middle of a 24 s
// run of 30 callers over three replicas on one hot key of 20/s, under each
// ON_UNAVAILABLE in turn. local: during the outage the fleet admits at
// most 1.2 × the limit for that time, and after it the shared item is
// charged what was admitted locally, so the whole run stays within the
// limit and the first second after admits no burst. The outage lasts from
// the kill until DynamoDB Local answers again (its JVM takes seconds to
// start). allow admits every request of the outage; block refuses every
// request sent after DynamoDB Local exited and answered before it was
// started again. (Counting by the answer's time alone, block once
// "admitted" 1: a request whose write landed as the kill began, answered
// a moment after it.)
//
// allow and block only count the outage's answers: their runs are shorter
// (the kill at 3 s of 14 s) and go side by side, after local's.
func TestOutageThreeModes(t *testing.T) {
	var (
		mu   sync.Mutex
		runs []outageRun
	)
	t.Cleanup(func() { logOutages(t, runs) })
	for _, mode := range []string{"local", "allow", "block"} {
		t.Run(mode, func(t *testing.T) {
			timing := outageTiming{before: 6 * time.Second, run: 24 * time.Second}
			if mode != "local" {
				t.Parallel()
				timing = outageTiming{before: 3 * time.Second, run: 14 * time.Second}
			}
			r := runOutage(t, mode, timing)
			mu.Lock()
			runs = append(runs, r)
			mu.Unlock()
			limit := func(d time.Duration) float64 { return 20 * d.Seconds() }
			switch mode {
			case "local":
				if float64(r.during) > 1.2*limit(r.outage)+20 {
					t.Errorf("local: %d admitted in the %v outage, want at most 1.2 × %.0f (+ one burst)", r.during, r.outage.Round(time.Millisecond), limit(r.outage))
				}
				if float64(r.total) > 1.1*(20+limit(r.run)) {
					t.Errorf("local: %d admitted over the %v run, want at most 1.1 × %.0f: what was admitted locally is charged", r.total, r.run.Round(time.Millisecond), 20+limit(r.run))
				}
				if r.local == 0 {
					t.Error("local: no local decision counted")
				}
			case "allow":
				if r.during < r.asked/2 {
					t.Errorf("allow: %d admitted in the outage, want nearly all", r.during)
				}
			case "block":
				if r.dead > 0 {
					t.Errorf("block: %d admitted of the requests sent after DynamoDB Local exited and answered before it started again, want none", r.dead)
				}
			}
			if r.errs > 0 {
				t.Errorf("%d calls failed, want none", r.errs)
			}
		})
	}
}

// logOutages logs the runs of TestOutageThreeModes as a table.
func logOutages(t *testing.T, runs []outageRun) {
	t.Log("mode   | outage | limit in outage | admitted in outage | admitted in 1 s after | run   | limit of run | admitted in run")
	for _, r := range runs {
		t.Logf("%-6s | %5.1fs | %15.0f | %18d | %21d | %4.1fs | %12.0f | %15d",
			r.mode, r.outage.Seconds(), 20*r.outage.Seconds(), r.during, r.firstSecondAfter, r.run.Seconds(), 20+20*r.run.Seconds(), r.total)
	}
}

// outageTiming is when an outage run kills DynamoDB Local (before, for
// 5 s) and how long its callers ask (run).
type outageTiming struct {
	before, run time.Duration
}

// runOutage runs the outage of TestOutageThreeModes under mode.
func runOutage(t *testing.T, mode string, timing outageTiming) outageRun {
	local := dynamotest.StartOnDisk(t)
	env := dynamoEnvAt(t, local, "LOG_LEVEL=warn", "BACKEND_TIMEOUT=100ms", "ON_UNAVAILABLE="+mode)
	f := startFleetEnv(t, outageConfig, 3, env)
	if mode == "local" {
		f.counted(t)
	}
	var (
		mu                sync.Mutex
		admitted          [][2]time.Time // sent, answered
		asked             []time.Time
		killAt, backAt    time.Time
		deadAt, restartAt time.Time // DynamoDB Local exited; started again
		stopErr, startErr error
	)
	outageDone := make(chan struct{})
	go func() {
		defer close(outageDone)
		time.Sleep(timing.before)
		t.Logf("%s: fleet size as the replicas count it: %.0f (sum over 3)", mode, f.metric(t, "ratelimit_fleet_size"))
		mu.Lock()
		killAt = time.Now()
		mu.Unlock()
		stopErr = local.Stop()
		mu.Lock()
		deadAt = time.Now()
		mu.Unlock()
		time.Sleep(5 * time.Second)
		mu.Lock()
		restartAt = time.Now()
		mu.Unlock()
		startErr = local.Restart()
		mu.Lock()
		backAt = time.Now()
		mu.Unlock()
	}()
	req := &pb.RateLimitRequest{Domain: "fleet", Descriptors: []*rlv3.RateLimitDescriptor{descriptor("generic_key", "hot")}}
	l := f.driveWith(30, timing.run, func(int) *pb.RateLimitRequest { return req }, func(_ *pb.RateLimitRequest, resp *pb.RateLimitResponse, sent time.Time) {
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, now)
		if resp.GetOverallCode() == pb.RateLimitResponse_OK {
			admitted = append(admitted, [2]time.Time{sent, now})
		}
	})
	select {
	case <-outageDone:
	case <-time.After(60 * time.Second):
		t.Fatal("DynamoDB Local was not stopped and started again within 60 s")
	}
	if stopErr != nil || startErr != nil {
		t.Fatalf("stopping or restarting DynamoDB Local: %v, %v", stopErr, startErr)
	}
	mu.Lock()
	defer mu.Unlock()
	r := outageRun{mode: mode, total: len(admitted), outage: backAt.Sub(killAt), run: l.elapsed, errs: l.errs.Load(),
		local: f.metric(t, "ratelimit_local_decisions_total")}
	for _, at := range asked {
		if !at.Before(killAt) && at.Before(backAt) {
			r.asked++
		}
	}
	for _, a := range admitted {
		sent, at := a[0], a[1]
		if !sent.Before(deadAt) && at.Before(restartAt) {
			r.dead++
		}
		switch {
		case at.Before(killAt):
			r.before++
		case at.Before(backAt):
			r.during++
		default:
			r.after++
			if at.Before(backAt.Add(time.Second)) {
				r.firstSecondAfter++
			}
		}
	}
	t.Logf("%s: %d admitted before, %d during the %v outage (of %d asked; %d sent while DynamoDB Local was down), %d after (%d in its first second); %d errors; local decisions %.0f; repayments %.0f applied, %.0f failed",
		mode, r.before, r.during, r.outage.Round(time.Millisecond), r.asked, r.dead, r.after, r.firstSecondAfter, r.errs, r.local,
		f.metric(t, "ratelimit_settle_ups_total", `result="applied"`), f.metric(t, "ratelimit_settle_ups_total", `result="failed"`))
	if l.errs.Load() > 0 {
		t.Logf("first error: %v", l.firstErr.Load())
	}
	return r
}

// TestWarmingDecidesLocally: a replica whose DynamoDB does not answer yet
// (nothing listens at its endpoint) decides under ON_UNAVAILABLE=local on
// its own bucket, never an unconditional OK, and each answer says in its
// dynamic metadata that it was decided locally. With FLEET_SIZE=1 its share
// is the whole limit, and once DynamoDB has failed its calls for a second
// (an outage: nobody admits on the shared bucket) its bucket starts full: 3
// a minute admits 3 of 5. Without, it has not counted
// the fleet, so no share of the burst is known to be its own (the burst is
// the shared bucket's to give once DynamoDB answers): its bucket starts
// bare, holding the request that made it, and refills at its share; of 5
// asked at once the first is admitted.
func TestWarmingDecidesLocally(t *testing.T) {
	ok := pb.RateLimitResponse_OK
	over := pb.RateLimitResponse_OVER_LIMIT
	for _, tc := range []struct {
		name  string
		fleet []string
		want  []pb.RateLimitResponse_Code
	}{
		{"fleet size set", []string{"FLEET_SIZE=1"}, []pb.RateLimitResponse_Code{ok, ok, ok, over, over}},
		{"fleet not counted", nil, []pb.RateLimitResponse_Code{ok, over, over, over, over}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := dynamoEnv(t, append([]string{"BACKEND_TIMEOUT=100ms", "ON_UNAVAILABLE=local"}, tc.fleet...)...)
			setEnv(env, "DYNAMODB_ENDPOINT", fmt.Sprintf("http://127.0.0.1:%d", testutil.FreePort(t)))
			dir := t.TempDir()
			writeConfig(t, dir, "e2e.yaml", e2eConfig)
			p := startBinaryUnready(t, dir, env...)
			client := rlsClient(t, p)
			// DynamoDB has failed this replica's calls for a second: an
			// outage. (A call on another bucket fails first.)
			if _, err := client.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{
				Domain: "e2e", Descriptors: []*rlv3.RateLimitDescriptor{descriptor("generic_key", "plenty")},
			}); err != nil {
				t.Fatalf("ShouldRateLimit while DynamoDB is away: %v\n%s", err, p.Output())
			}
			time.Sleep(time.Second)
			var codes []pb.RateLimitResponse_Code
			for range 5 {
				resp, err := client.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{
					Domain: "e2e", Descriptors: []*rlv3.RateLimitDescriptor{descriptor("generic_key", "three")},
				})
				if err != nil {
					t.Fatalf("ShouldRateLimit while DynamoDB is away: %v\n%s", err, p.Output())
				}
				codes = append(codes, resp.GetOverallCode())
				if !resp.GetDynamicMetadata().GetFields()["dynalimit.local"].GetBoolValue() {
					t.Errorf("answer %d has no dynalimit.local: true in its dynamic metadata: %v", len(codes), resp.GetDynamicMetadata())
				}
			}
			if fmt.Sprint(codes) != fmt.Sprint(tc.want) {
				t.Errorf("answers while DynamoDB is away = %v, want %v", codes, tc.want)
			}
		})
	}
}
