package main

import (
	"path"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/dynalimit/dynalimit/internal/israce"
	"github.com/dynalimit/dynalimit/internal/redistest"
	"github.com/dynalimit/dynalimit/internal/testutil"
)

// redisStore is one redis-server the replicas share (fleetStore): each
// test's keys in a namespace of its own.
type redisFleetStore struct{ srv *redistest.Server }

func newRedisFleetStore(t *testing.T) redisFleetStore {
	t.Helper()
	return redisFleetStore{srv: redistest.Start(t, redistest.Options{})}
}

func (s redisFleetStore) env(t *testing.T, extra ...string) []string {
	t.Helper()
	ns := strings.NewReplacer("/", "-", "_", "-").Replace(strings.ToLower(t.Name()))
	return append([]string{"BACKEND_TYPE=redis", "REDIS_URL=" + s.srv.Addr(), "NAMESPACE=" + ns}, extra...)
}

// freeze stops redis-server (SIGSTOP) for d: calls reach its socket and
// wait there.
func (s redisFleetStore) freeze(_ *testing.T, d time.Duration) {
	s.srv.Freeze()
	time.Sleep(d)
	s.srv.Thaw()
}

// evalsha is how many calls of the decision script Redis has run.
func (s redisFleetStore) evalsha() float64 {
	st := s.srv.CommandStats()
	return float64(st["evalsha"] + st["eval"])
}

// TestRedisFleetHotKey: three replicas on one redis-server, 90 callers on
// one hot key of 10/s with a burst of 100, under each ON_UNAVAILABLE mode:
// the fleet admits at most 100 + 10·t and at least 97% of it, with no
// error, and the decisions waiting on the key share calls: at most 0.1
// calls of the script per decision.
func TestRedisFleetHotKey(t *testing.T) {
	store := newRedisFleetStore(t)
	modes := []string{"local", "allow", "block"}
	if israce.Enabled {
		// make test runs this test again without -race, every mode with
		// the bound on calls; under -race one mode is enough.
		modes = modes[:1]
	}
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			testutil.BusyCore(t)
			f := startFleetOn(t, store, coldConfig, 3, "ON_UNAVAILABLE="+mode, "BACKEND_TIMEOUT=100ms")
			req := &pb.RateLimitRequest{Domain: "fleet", Descriptors: []*rlv3.RateLimitDescriptor{descriptor("cold", "hot-"+mode)}}
			calls := store.evalsha()
			l := f.driveWith(90, 5*time.Second, func(int) *pb.RateLimitRequest { return req }, nil)
			calls = store.evalsha() - calls
			bound := 100 + 10*l.elapsed.Seconds()
			decisions := float64(l.ok.Load() + l.over.Load())
			t.Logf("hot key on Redis, ON_UNAVAILABLE=%s: admitted %d of %.0f (%.3f), %.0f decisions, %.0f script calls (%.4f per decision), local decisions %.0f, errors %d",
				mode, l.ok.Load(), bound, float64(l.ok.Load())/bound, decisions, calls, calls/decisions, f.metric(t, "ratelimit_local_decisions_total"), l.errs.Load())
			if got := float64(l.ok.Load()); got > bound || got < 0.97*bound {
				t.Errorf("admitted %.0f, want within [0.97, 1] × %.0f", got, bound)
			}
			if n := l.errs.Load(); n > 0 {
				t.Errorf("%d calls failed, want none; first: %v", n, l.firstErr.Load())
			}
			checkFewLocal(t, f, decisions)
			switch {
			case israce.Enabled:
				// Under the race detector the replicas spend several
				// times the CPU on each request, so fewer decisions
				// queue behind each call (0.11–0.12 per decision here):
				// make test checks the bound in its pass without -race.
				t.Logf("built with -race: %.4f script calls per decision; the bound of 0.1 is checked without -race", calls/decisions)
			case calls/decisions > 0.1:
				t.Errorf("%.0f script calls for %.0f decisions on one hot key, want at most 0.1 per decision", calls, decisions)
			}
		})
	}
}

// TestRedisFleetNewKeys: three replicas on one redis-server, and on a
// cluster of three masters, the chain of a tenant of 10/s with a burst of
// 100 over a new api_key on every call, 90 callers: the tenant gets at
// least 97% of 100 + 10·t and never more, with no error. (On the cluster
// the key's and the tenant's buckets lie in different slots: each
// decision is two calls, the key's given back when the tenant refuses.)
func TestRedisFleetNewKeys(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		store := newRedisFleetStore(t)
		fleetNewKeys(t, store.env(t, "BACKEND_TIMEOUT=100ms"))
	})
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.StartCluster(t, 3, 0, redistest.Options{})
		fleetNewKeys(t, []string{"BACKEND_TYPE=redis", "REDIS_TYPE=cluster", "REDIS_URL=" + strings.Join(cl.Seeds(), ","), "BACKEND_TIMEOUT=100ms"})
	})
}

func fleetNewKeys(t *testing.T, env []string) {
	t.Helper()
	testutil.BusyCore(t)
	f := startFleetEnv(t, hierarchyFleetConfig, 3, append([]string{"LOG_LEVEL=warn"}, env...))
	var n atomic.Int64
	l := f.driveWith(90, 5*time.Second, func(int) *pb.RateLimitRequest {
		return &pb.RateLimitRequest{Domain: "fleet", Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{
			{Key: "tenant", Value: "acme"}, {Key: "api_key", Value: "new-" + strconv.FormatInt(n.Add(1), 10)},
		}}}}
	}, nil)
	bound := 100 + 10*l.elapsed.Seconds()
	t.Logf("hot tenant over new keys on Redis (%s): admitted %d of %.0f (%.3f), %d refused, local decisions %.0f, errors %d",
		path.Base(t.Name()), l.ok.Load(), bound, float64(l.ok.Load())/bound, l.over.Load(), f.metric(t, "ratelimit_local_decisions_total"), l.errs.Load())
	if got := float64(l.ok.Load()); got > bound || got < 0.97*bound {
		t.Errorf("admitted %.0f, want within [0.97, 1] × %.0f", got, bound)
	}
	if n := l.errs.Load(); n > 0 {
		t.Errorf("%d calls failed, want none; first: %v", n, l.firstErr.Load())
	}
	checkFewLocal(t, f, float64(l.ok.Load()+l.over.Load()))
}

// checkFewLocal: on a Redis that answers, the fleet decides on Redis, not
// on its local buckets: at most 1% of its decisions local (the runs of
// BENCHMARKS.md had none; a call past its 100 ms budget on a machine short
// of CPU makes one).
func checkFewLocal(t *testing.T, f *fleet, decisions float64) {
	t.Helper()
	if local := f.metric(t, "ratelimit_local_decisions_total"); local > 0.01*decisions {
		t.Errorf("%.0f of %.0f decisions were local on a Redis that answers, want at most 1%%", local, decisions)
	}
}

// TestRedisOneCallPerDecision: one caller asking a warm key in turn costs
// one call of the script per decision, no more.
func TestRedisOneCallPerDecision(t *testing.T) {
	store := newRedisFleetStore(t)
	// block: no fleet heartbeats, whose script calls would count too.
	f := startFleetOn(t, store, coldConfig, 1, "ON_UNAVAILABLE=block")
	req := &pb.RateLimitRequest{Domain: "fleet", Descriptors: []*rlv3.RateLimitDescriptor{descriptor("cold", "warm")}}
	f.driveWith(1, 200*time.Millisecond, func(int) *pb.RateLimitRequest { return req }, nil) // warm
	calls := store.evalsha()
	l := f.driveWith(1, time.Second, func(int) *pb.RateLimitRequest { return req }, nil)
	calls = store.evalsha() - calls
	decisions := float64(l.ok.Load() + l.over.Load())
	t.Logf("one caller on a warm key: %.0f decisions, %.0f script calls", decisions, calls)
	if calls > decisions || decisions == 0 {
		t.Errorf("%.0f script calls for %.0f decisions, want at most one each", calls, decisions)
	}
}

// TestRedisFreeze: one hot key through a 5 s SIGSTOP of redis-server in the
// middle of a 12 s run of 90 callers over three replicas, in the default
// mode (local): the fleet admits at most 1.2 × (100 + 10·t), no call
// fails, and each replica's goroutines stay under twice and its resident
// memory under 64 MB over what they were under the same load just before
// the freeze (the median of five samples late in the freeze, and the
// largest).
func TestRedisFreeze(t *testing.T) {
	store := newRedisFleetStore(t)
	testutil.BusyCore(t)
	f := startFleetOn(t, store, coldConfig, 3, "BACKEND_TIMEOUT=50ms")
	f.counted(t)
	req := &pb.RateLimitRequest{Domain: "fleet", Descriptors: []*rlv3.RateLimitDescriptor{descriptor("cold", "frozen")}}
	done := make(chan *load)
	go func() { done <- f.driveWith(90, 12*time.Second, func(int) *pb.RateLimitRequest { return req }, nil) }()
	time.Sleep(4500 * time.Millisecond)
	var goroutines, rss []float64 // under the same load, before the freeze
	for _, p := range f.procs {
		goroutines = append(goroutines, metricOf(t, p, "go_goroutines"))
		rss = append(rss, metricOf(t, p, "process_resident_memory_bytes"))
	}
	time.Sleep(500 * time.Millisecond)
	froze := make(chan struct{})
	go func() { store.freeze(t, 5*time.Second); close(froze) }()
	// Five samples from 3.5 s into the freeze to 4.3 s: goroutines that
	// piled up would be there in every one (and more in each); one sample
	// caught a passing burst once (51 where the others saw 22-24).
	time.Sleep(3500 * time.Millisecond)
	samples := make([][]float64, len(f.procs))
	peak := make([]float64, len(f.procs))
	for k := range 5 {
		if k > 0 {
			time.Sleep(200 * time.Millisecond)
		}
		for i, p := range f.procs {
			samples[i] = append(samples[i], metricOf(t, p, "go_goroutines"))
			peak[i] = max(peak[i], metricOf(t, p, "process_resident_memory_bytes"))
		}
	}
	for i := range f.procs {
		g := slices.Sorted(slices.Values(samples[i]))[2]
		t.Logf("replica %d frozen: goroutines %v, median %.0f (%.0f before), RSS at most %.1f MB (%.1f before)", i, samples[i], g, goroutines[i], peak[i]/1e6, rss[i]/1e6)
		if g >= 2*goroutines[i] {
			t.Errorf("replica %d: a median of %.0f goroutines while Redis is frozen, want under twice the %.0f before", i, g, goroutines[i])
		}
		if peak[i]-rss[i] > 64<<20 {
			t.Errorf("replica %d: RSS %.1f MB while Redis is frozen, want under 64 MB over the %.1f MB before", i, peak[i]/1e6, rss[i]/1e6)
		}
	}
	<-froze
	l := <-done
	bound := 100 + 10*l.elapsed.Seconds()
	t.Logf("hot key through a 5 s freeze of Redis: admitted %d of %.0f (%.3f), local decisions %.0f, errors %d",
		l.ok.Load(), bound, float64(l.ok.Load())/bound, f.metric(t, "ratelimit_local_decisions_total"), l.errs.Load())
	if got := float64(l.ok.Load()); got > 1.2*bound {
		t.Errorf("admitted %.0f, want at most 1.2 × %.0f", got, bound)
	}
	if n := l.errs.Load(); n > 0 {
		t.Errorf("%d calls failed, want none; first: %v", n, l.firstErr.Load())
	}
}

// metricOf is one metric of one replica.
func metricOf(t *testing.T, p *proc, name string) float64 {
	t.Helper()
	f := &fleet{procs: []*proc{p}}
	return f.metric(t, name)
}
