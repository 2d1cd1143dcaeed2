package main

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
)

const fleetConfig = `domain: fleet
descriptors:
  - key: generic_key
    value: hot
    rate_limit:
      unit: second
      requests_per_unit: 10
      burst: 100
  - key: generic_key
    value: wide
    rate_limit:
      unit: second
      requests_per_unit: 1000000000
  - key: generic_key
    value: usage
    rate_limit:
      unit: year
      unit_multiplier: 50
      requests_per_unit: 1000000
`

// fleet is several replicas of the binary on one DynamoDB Local table.
type fleet struct {
	procs   []*proc
	clients []pb.RateLimitServiceClient
	// callTimeout is each call's deadline (2 s when zero).
	callTimeout time.Duration
}

func startFleet(t *testing.T, replicas int, env ...string) *fleet {
	t.Helper()
	return startFleetWith(t, fleetConfig, replicas, env...)
}

// startFleetWith starts replicas of the binary on one new DynamoDB Local
// table, serving the descriptor configuration config.
func startFleetWith(t *testing.T, config string, replicas int, env ...string) *fleet {
	t.Helper()
	return startFleetOn(t, localStore{dynamotest.Shared(t)}, config, replicas, env...)
}

// startFleetOn starts replicas of the binary on one new table of store,
// serving the descriptor configuration config.
func startFleetOn(t *testing.T, store fleetStore, config string, replicas int, env ...string) *fleet {
	t.Helper()
	return startFleetEnv(t, config, replicas, store.env(t, append([]string{"LOG_LEVEL=warn"}, env...)...))
}

// startFleetEnv starts replicas of the binary with env (a table's
// settings, dynamoEnv's), serving the descriptor configuration config.
func startFleetEnv(t *testing.T, config string, replicas int, env []string) *fleet {
	t.Helper()
	dir := t.TempDir()
	writeConfig(t, dir, "fleet.yaml", config)
	f := &fleet{}
	for range replicas {
		p := startBinary(t, dir, env...)
		cc, err := grpc.NewClient(p.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cc.Close() })
		f.procs = append(f.procs, p)
		f.clients = append(f.clients, pb.NewRateLimitServiceClient(cc))
	}
	return f
}

// load is what callers saw.
type load struct {
	ok, over, errs atomic.Int64
	firstErr       atomic.Value
	elapsed        time.Duration
}

// drive runs callers spread over the replicas, each asking for one token of
// value in a loop, for d.
func (f *fleet) drive(callers int, value string, d time.Duration) *load {
	req := &pb.RateLimitRequest{Domain: "fleet", Descriptors: []*rlv3.RateLimitDescriptor{descriptor("generic_key", value)}}
	return f.driveWith(callers, d, func(int) *pb.RateLimitRequest { return req }, nil)
}

// driveWith runs callers spread over the replicas for d, caller c asking
// next(c) in a loop; seen, when set, is told of every answered request and
// when it was sent.
func (f *fleet) driveWith(callers int, d time.Duration, next func(caller int) *pb.RateLimitRequest, seen func(req *pb.RateLimitRequest, resp *pb.RateLimitResponse, sent time.Time)) *load {
	var l load
	var wg sync.WaitGroup
	start := time.Now()
	stop := start.Add(d)
	for c := range callers {
		client := f.clients[c%len(f.clients)]
		wg.Go(func() {
			for time.Now().Before(stop) {
				req := next(c)
				sent := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), cmp.Or(f.callTimeout, 2*time.Second))
				resp, err := client.ShouldRateLimit(ctx, req)
				cancel()
				switch {
				case err != nil:
					l.errs.Add(1)
					l.firstErr.CompareAndSwap(nil, err.Error())
					continue
				case resp.GetOverallCode() == pb.RateLimitResponse_OK:
					l.ok.Add(1)
				default:
					l.over.Add(1)
				}
				if seen != nil {
					seen(req, resp, sent)
				}
			}
		})
	}
	wg.Wait()
	l.elapsed = time.Since(start)
	return &l
}

// metric sums a metric's samples whose labels contain every one of match,
// over every replica's /metrics.
func (f *fleet) metric(t *testing.T, name string, match ...string) float64 {
	t.Helper()
	var sum float64
	for _, p := range f.procs {
		sum += scrape(t, "http://"+p.DebugAddr()+"/metrics", name, match...)
	}
	return sum
}

// scrape sums the samples of a metric at url whose labels contain every one
// of match.
func scrape(t *testing.T, url, name string, match ...string) float64 {
	t.Helper()
	sum, err := scrapeErr(url, name, match...)
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

// scrapeErr is scrape, returning its error.
func scrapeErr(url, name string, match ...string) (float64, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
lines:
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		for _, m := range match {
			if !strings.Contains(line, m) {
				continue lines
			}
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err == nil {
			sum += v
		}
	}
	return sum, sc.Err()
}

// allowed returns the answers ON_UNAVAILABLE=allow made on the fleet, and
// the DynamoDB calls that explain them, and fails t unless every allowed
// answer is owed to such a call: on each replica at most perReplica (its
// callers, each waiting with one request) per call. Those calls are the
// ones that ran out, and the reads slower than le seconds (a bucket bound
// of ratelimit_dynamodb_call_duration_seconds at or below the budget): a
// read runs on under a deadline of its own, to fill a cache after its
// waiters gave up, and the waiters of a read DynamoDB left unanswered for
// a whole budget are decided by allow. It waits out that deadline first,
// so that such reads are counted. An answer of allow that
// no slow call explains is contention or a cold read turned into an
// outage.
func (f *fleet) allowed(t *testing.T, perReplica int, le string) (allowed, slow float64) {
	t.Helper()
	time.Sleep(time.Second) // a read's own deadline (flightTimeout) at most
	const latency = "ratelimit_dynamodb_call_duration_seconds"
	for i, p := range f.procs {
		url := "http://" + p.DebugAddr() + "/metrics"
		a := scrape(t, url, "ratelimit_on_unavailable_total", `decision="allowed"`)
		n := scrape(t, url, "ratelimit_dynamodb_calls_total", `outcome="timeout"`)
		for _, read := range []string{`operation="GetItem"`, `operation="BatchGetItem"`} {
			n += scrape(t, url, latency+"_count", read) - scrape(t, url, latency+"_bucket", read, `le="`+le+`"`)
		}
		if a > float64(perReplica)*n {
			t.Errorf("replica %d answered %.0f by ON_UNAVAILABLE=allow after %.0f DynamoDB calls that ran out or reads slower than %s s, want at most %d each: an allowed answer no call of DynamoDB explains", i, a, n, le, perReplica)
		}
		allowed, slow = allowed+a, slow+n
	}
	return allowed, slow
}

// checkReached fails t unless the fleet's OK answers reach 97% of bound,
// but for the decisions it refused as contended: those whose own bucket
// DynamoDB Local was too slow to decide within BACKEND_TIMEOUT
// (ratelimit_dynamodb_contended_total), which are its speed, not ours. A
// fleet beside a second package's tests (make test), with DynamoDB Local
// answering in 17 ms at the median where it answers in 4, admitted 167 of
// 200 and refused 95 as contended. Contention may refuse at most 2% of
// the decisions: a store that refused by contention at large would fail.
func checkReached(t *testing.T, f *fleet, ok, decisions, bound float64) {
	t.Helper()
	contended := f.metric(t, "ratelimit_dynamodb_contended_total")
	if ok+contended < 0.97*bound {
		t.Errorf("%v OK answers and %.0f refused as contended, want at least %.0f together (97%% of %.0f)", ok, contended, 0.97*bound, bound)
	}
	if contended > 0.02*decisions {
		t.Errorf("%.0f of %.0f decisions refused as contended, want at most 2%%", contended, decisions)
	}
}

// TestFleetHotBucket is the fleet as users run it: three replicas of the
// binary on one DynamoDB Local, 90 callers over gRPC on one bucket of 10/s
// with a burst of 100, for 10 s, BACKEND_TIMEOUT=200ms. Under either
// ON_UNAVAILABLE, the table's admissions never exceed 100 + 10·t and the
// OK answers reach at least 97% of it (checkReached), and no call fails: contention is
// never an outage. Under allow, an OK answer beyond the table's is owed to
// a DynamoDB call that ran out (fleet.allowed): DynamoDB Local on a
// machine short of CPU, stalled past 200 ms once in 20 runs with a core
// kept busy (48 answers of allow after three calls ran out).
func TestFleetHotBucket(t *testing.T) {
	const callers = 90
	for _, policy := range []string{"allow", "block"} {
		t.Run(policy, func(t *testing.T) {
			f := startFleet(t, 3, "BACKEND_TIMEOUT=200ms", "ON_UNAVAILABLE="+policy)
			l := f.drive(callers, "hot", 10*time.Second)
			bound := 100 + 10*l.elapsed.Seconds()
			ok := float64(l.ok.Load())
			allowed, slow := f.allowed(t, callers/len(f.procs), "0.1")
			t.Logf("ON_UNAVAILABLE=%s: %d OK (%.0f of them allowed by ON_UNAVAILABLE), %d OVER_LIMIT, %d errors in %v; bound %.0f (%.1f%%); UpdateItem calls %.0f, contended %.0f, DynamoDB calls that ran out or reads slower than 100 ms %.0f",
				policy, l.ok.Load(), allowed, l.over.Load(), l.errs.Load(), l.elapsed.Round(time.Millisecond), bound, 100*ok/bound,
				f.metric(t, "ratelimit_dynamodb_calls_total", `operation="UpdateItem"`), f.metric(t, "ratelimit_dynamodb_contended_total"), slow)
			if decided := ok - allowed; decided > bound {
				t.Errorf("the table admitted %.0f, want at most %.0f (100 + 10/s × %v)", decided, bound, l.elapsed)
			}
			checkReached(t, f, ok, float64(l.ok.Load()+l.over.Load()), bound)
			if n := l.errs.Load(); n > 0 {
				t.Errorf("%d calls failed, want none; first: %v", n, l.firstErr.Load())
			}
		})
	}
}

// TestFleetColdStart starts three replicas with BACKEND_TIMEOUT=50ms and no
// decision before 90 callers arrive at once (ON_UNAVAILABLE=allow). Waiting
// on a cold config or bucket read that another decision started is
// contention, never an outage: it must not turn into a free admission.
//
// What ON_UNAVAILABLE=allow admits is told apart from what the table
// decided. The table's own admissions never exceed 100 + 10·t. An answer
// of allow is an admission by choice only when DynamoDB itself left a call
// unanswered past the budget: on each replica, every allowed answer is
// owed to one of its DynamoDB calls that ran out or to a read that took
// longer than 50 ms (a read runs on under a deadline of its own), and one
// such call answers at most the 30
// callers of that replica, each waiting on it with its one request. A cold
// read whose waiters were answered by allow before DynamoDB had left it
// unanswered for a budget breaks that count. (Counting only the calls that
// ran out missed those reads: 1 run in 20 under -race with a core busy.)
//
// The machine decides how many calls run out. After its first call, each
// caller waits 2 ms between calls; even so, with a core kept busy by
// another process, a -race run leaves three replicas and DynamoDB Local's
// JVM short of CPU, and in about one run in two a batch of first writes
// waits past 50 ms (CI: 156 OK, 90 of them allowed after 3 unanswered
// writes, the table's own 66 within the bound of 130).
func TestFleetColdStart(t *testing.T) {
	const callers = 90
	f := startFleet(t, 3, "BACKEND_TIMEOUT=50ms", "ON_UNAVAILABLE=allow")
	req := &pb.RateLimitRequest{Domain: "fleet", Descriptors: []*rlv3.RateLimitDescriptor{descriptor("generic_key", "hot")}}
	var first sync.Map
	l := f.driveWith(callers, 3*time.Second, func(c int) *pb.RateLimitRequest {
		if _, again := first.LoadOrStore(c, true); again {
			time.Sleep(2 * time.Millisecond)
		}
		return req
	}, nil)
	bound := 100 + 10*l.elapsed.Seconds()
	allowed, slow := f.allowed(t, callers/len(f.procs), "0.05")
	t.Logf("cold start, 50 ms budget: %d OK (%.0f of them allowed by ON_UNAVAILABLE), %d OVER_LIMIT, %d errors in %v; bound %.0f; DynamoDB calls that ran out or reads slower than 50 ms %.0f",
		l.ok.Load(), allowed, l.over.Load(), l.errs.Load(), l.elapsed.Round(time.Millisecond), bound, slow)
	if decided := float64(l.ok.Load()) - allowed; decided > bound {
		t.Errorf("the table admitted %.0f, want at most %.0f", decided, bound)
	}
	if n := l.errs.Load(); n > 0 {
		t.Errorf("%d calls failed, want none; first: %v", n, l.firstErr.Load())
	}
}

// TestFleetWritesPerDecision counts DynamoDB writes per decision on one hot
// bucket far below its limit, 3 replicas × 30 callers: decisions queued on
// one item share one conditional write, so writes per decision stay at or
// below 0.2.
func TestFleetWritesPerDecision(t *testing.T) {
	f := startFleet(t, 3, "BACKEND_TIMEOUT=200ms", "ON_UNAVAILABLE=block")
	f.drive(3, "wide", 500*time.Millisecond) // warm: configs and images
	before := f.metric(t, "ratelimit_dynamodb_calls_total", `operation="UpdateItem"`)
	reads := f.metric(t, "ratelimit_dynamodb_calls_total", `operation="GetItem"`)
	l := f.drive(90, "wide", 5*time.Second)
	writes := f.metric(t, "ratelimit_dynamodb_calls_total", `operation="UpdateItem"`) - before
	reads = f.metric(t, "ratelimit_dynamodb_calls_total", `operation="GetItem"`) - reads
	decisions := float64(l.ok.Load() + l.over.Load())
	t.Logf("%0.f decisions in %v (%.0f/s), %.0f UpdateItem (%.3f per decision), %.0f GetItem, %d refused (contended: %.0f queued, %.0f raced, %.0f read), %d errors",
		decisions, l.elapsed.Round(time.Millisecond), decisions/l.elapsed.Seconds(), writes, writes/decisions, reads, l.over.Load(),
		f.metric(t, "ratelimit_dynamodb_contended_total", `reason="queued"`), f.metric(t, "ratelimit_dynamodb_contended_total", `reason="raced"`),
		f.metric(t, "ratelimit_dynamodb_contended_total", `reason="read"`), l.errs.Load())
	// Far below the limit a refusal can only be contention: a write of
	// DynamoDB Local that took the whole budget on a busy machine. Rare.
	if l.errs.Load() > 0 || float64(l.over.Load()) > 0.01*decisions {
		t.Errorf("%d refused and %d failed far below the limit, want no errors and under 1%% refused; first error: %v", l.over.Load(), l.errs.Load(), l.firstErr.Load())
	}
	if writes/decisions > 0.2 {
		t.Errorf("%.3f UpdateItem calls per decision, want at most 0.2", writes/decisions)
	}
}

// TestFleetUsageCharges is a usage-based limit as Envoy Gateway drives it,
// on the fleet: 3 replicas × 30 callers over gRPC, each request a check
// (the descriptor's hits_addend 0) then a stream-end charge of 7 (its
// hits_addend 7), on one bucket of 1,000,000 that refills too slowly to
// matter, BACKEND_TIMEOUT=200ms. Every charge that was answered without an
// error has landed, exactly once: the bucket holds 1,000,000 − 7 × the
// answered charges (unanswered ones are counted apart and may have landed).
func TestFleetUsageCharges(t *testing.T) {
	const (
		callers = 90
		each    = 10
		cost    = 7
		budget  = 1_000_000
	)
	f := startFleet(t, 3, "BACKEND_TIMEOUT=200ms", "ON_UNAVAILABLE=allow")
	ask := func(c pb.RateLimitServiceClient, hits uint64) (*pb.RateLimitResponse, error) {
		d := descriptor("generic_key", "usage")
		d.HitsAddend = wrapperspb.UInt64(hits)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return c.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "fleet", Descriptors: []*rlv3.RateLimitDescriptor{d}})
	}
	before := f.metric(t, "ratelimit_dynamodb_calls_total", `operation="UpdateItem"`)
	var charged, failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	for c := range callers {
		client := f.clients[c%len(f.clients)]
		wg.Go(func() {
			for range each {
				if _, err := ask(client, 0); err != nil {
					firstErr.CompareAndSwap(nil, err.Error())
				}
				if _, err := ask(client, cost); err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				charged.Add(1)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	writes := f.metric(t, "ratelimit_dynamodb_calls_total", `operation="UpdateItem"`) - before
	resp, err := ask(f.clients[0], 0)
	if err != nil {
		t.Fatalf("final check: %v", err)
	}
	left := int64(resp.GetStatuses()[0].GetLimitRemaining())
	t.Logf("%d requests (check + charge of %d) in %v; %d charges answered, %d failed; %.0f UpdateItem (%.3f per call); %d left",
		callers*each, cost, elapsed.Round(time.Millisecond), charged.Load(), failed.Load(), writes, writes/float64(2*callers*each), left)
	if n := failed.Load(); n > 0 {
		t.Logf("%d charges failed (first: %v); they may or may not have landed", n, firstErr.Load())
	}
	most, least := int64(budget)-cost*charged.Load(), int64(budget)-cost*(charged.Load()+failed.Load())
	if left > most || left < least {
		t.Errorf("%d left, want %d (every answered charge landed once) down to %d (and every failed one too)", left, most, least)
	}
	if failed.Load() == 0 && left != most {
		t.Errorf("%d left, want exactly %d", left, most)
	}
}
