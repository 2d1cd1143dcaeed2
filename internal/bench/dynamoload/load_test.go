//go:build dynamobench

package dynamoload

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
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

	"github.com/dynalimit/dynalimit/internal/bench/benchenv"
	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/internal/envoytest"
)

const (
	configDir = "testdata/config"
	domain    = "dynbench"
	// backendTimeout is the service's BACKEND_TIMEOUT: DynamoDB Local
	// answers a write in milliseconds to tens of milliseconds on two shared
	// cores, and a second leaves room for its pauses.
	backendTimeout = "1s"
	// callTimeout bounds one call: a decision takes at most about twice
	// BACKEND_TIMEOUT.
	callTimeout = 5 * time.Second
	// primeTimeout bounds the passes that decide every key of a many-item
	// scenario before it is measured, by primeCallers callers: a first
	// decision on an item costs reads and a write, and more callers would
	// only queue them in DynamoDB Local past BACKEND_TIMEOUT.
	primeTimeout = 3 * time.Minute
	primeCallers = 32
	// jvmWarmup is how long DynamoDB Local is driven before the first
	// scenario, so that its JVM has compiled its hot paths: a cold JVM
	// spends several times the CPU per call.
	jvmWarmup = 5 * time.Second
)

// scenario is one table of the report.
type scenario struct {
	name string
	// key is the descriptor key (a rule of testdata/config); values are
	// the descriptor values cycled through, one bucket item each.
	key    string
	values []string
	// refuses: the rule refuses most calls, and OVER_LIMIT is a decision.
	refuses bool
	// env is added to the service's settings.
	env []string
}

// tuned are the settings of the tuned scenarios: stored limits cached for
// longer than the run (no refresh reads); the rejection cache stays at its
// default of 100,000 entries, which holds every item of KEYS ≤ 100,000.
// Batching has no setting: one write in flight per item, carrying every
// decision queued on it meanwhile.
var tuned = []string{"CONFIG_CACHE_TTL=1h"}

func scenarios(keys int) map[string]scenario {
	many := make([]string, keys)
	for i := range many {
		many[i] = "k" + strconv.Itoa(i)
	}
	hot := []string{"hot"}
	return map[string]scenario{
		"hot":            {name: "hot", key: "item", values: hot},
		"many":           {name: "many", key: "item", values: many},
		"hot-tuned":      {name: "hot-tuned", key: "item", values: hot, env: tuned},
		"many-tuned":     {name: "many-tuned", key: "item", values: many, env: tuned},
		"refuse":         {name: "refuse", key: "refuse", values: hot, refuses: true},
		"refuse-nocache": {name: "refuse-nocache", key: "refuse", values: hot, refuses: true, env: []string{"REJECTION_CACHE_SIZE=0"}},
	}
}

func TestDynamoLoad(t *testing.T) {
	duration := benchenv.Duration(t, "DURATION", 6*time.Second)
	warmup := benchenv.Duration(t, "WARMUP", 2*time.Second)
	callers := benchenv.Ints(t, "CALLERS", "16,64,256")
	keys := benchenv.Ints(t, "KEYS", "10000")[0]
	maxConns := benchenv.Ints(t, "CONNS", "8")[0]
	all := scenarios(keys)
	var run []scenario
	for _, name := range strings.Split(benchenv.Or("SCENARIOS", "hot,hot-tuned,many,many-tuned,refuse,refuse-nocache"), ",") {
		sc, ok := all[strings.TrimSpace(name)]
		if !ok {
			t.Fatalf("SCENARIOS: unknown scenario %q (hot, many, hot-tuned, many-tuned, refuse, refuse-nocache)", name)
		}
		run = append(run, sc)
	}
	dir, err := filepath.Abs(configDir)
	if err != nil {
		t.Fatal(err)
	}
	startLoad := benchenv.LoadAvg()
	started := time.Now()
	t.Logf("load average at start: %s", startLoad)

	local := dynamotest.Start(t)

	var results []result
	notes := map[string]string{}
	for i, sc := range run {
		t.Run(sc.name, func(t *testing.T) {
			// DynamoDB Local's own cost per write grows with the writes it
			// has taken (a hot item's writes took four times as long and
			// three times its CPU once 10,000 items had been written to a
			// table since dropped): each scenario gets it fresh, so that
			// scenarios compare.
			if i > 0 && !local.External() {
				if err := local.Restart(); err != nil {
					t.Fatal(err)
				}
			}
			svc := startService(t, local, dir, sc.env)
			pids := map[string]int{procService: svc.Pid(), procLocal: localPid(t, local.Endpoint()), procDriver: os.Getpid()}
			reqs := requests(sc)
			if len(reqs) > 1 {
				// Decide every item once, so that the measured runs see
				// warm items (their stored limits read and cached, their
				// images kept) as a long-running replica does; it warms
				// DynamoDB Local's JVM too.
				notes[sc.name] = prime(t, svc, reqs, maxConns)
			} else {
				notes[sc.name] = warmJVM(t, svc, maxConns)
			}
			for _, c := range callers {
				conns := min(c, maxConns)
				p := dial(t, svc.GRPCAddr(), conns)
				drive(p, c, reqs, sc.refuses, warmup, 0)
				before := snap(t, svc, pids)
				prof := profile(t, svc, fmt.Sprintf("%s-%d", sc.name, c), duration)
				l := drive(p, c, reqs, sc.refuses, duration, 0)
				after := snap(t, svc, pids)
				prof()
				p.close()
				r := newResult(sc.name, sc.refuses, c, conns, l, before, after)
				t.Log(r.summary())
				if r.decisions() == 0 {
					t.Errorf("%s, %d callers: no decision in %v", sc.name, c, duration)
				}
				if n := r.unexpected(); n > 0 {
					t.Errorf("%s, %d callers: %.0f OVER_LIMIT answers from a rule that never refuses (neither contention nor ON_UNAVAILABLE)", sc.name, c, n)
				}
				results = append(results, r)
			}
		})
	}
	header := fmt.Sprintf("DynamoDB Local %s, one ratelimit replica (BACKEND_TIMEOUT=%s, ON_UNAVAILABLE=block), "+
		"%v measured after %v warm-up per run, KEYS=%d, up to %d gRPC connections; "+
		"started %s, took %v; load average at start %s, at end %s\n",
		dynamotest.Version, backendTimeout, duration, warmup, keys, maxConns,
		started.Format("2006-01-02 15:04 MST"), time.Since(started).Round(time.Second), startLoad, benchenv.LoadAvg())
	out := report(results, header, notes)
	fmt.Print(out)
	if f := os.Getenv("BENCH_OUT"); f != "" {
		if err := os.WriteFile(f, []byte(out), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// startService creates a table of its own on local and serves the
// benchmark's rules from it with one ratelimit binary.
func startService(t *testing.T, local *dynamotest.Local, dir string, extra []string) *envoytest.Service {
	t.Helper()
	table := dynamotest.TableName(t)
	env := []string{
		"BACKEND_TYPE=dynamodb", "DYNAMODB_ENDPOINT=" + local.Endpoint(),
		"DYNAMODB_TABLE=" + table, "AWS_REGION=us-east-1",
		"BACKEND_TIMEOUT=" + backendTimeout, "ON_UNAVAILABLE=block",
	}
	if os.Getenv("PROFILE") != "" {
		env = append(env, "DEBUG_PPROF=true")
	}
	envoytest.RunBinary(t, env, "table", "create")
	local.DropAtCleanup(t, table)
	return envoytest.StartService(t, dir, append(env, extra...)...)
}

// requests returns one request per descriptor value of sc.
func requests(sc scenario) []*pb.RateLimitRequest {
	out := make([]*pb.RateLimitRequest, len(sc.values))
	for i, v := range sc.values {
		out[i] = &pb.RateLimitRequest{Domain: domain, Descriptors: []*rlv3.RateLimitDescriptor{{
			Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: sc.key, Value: v}},
		}}}
	}
	return out
}

// prime cycles through reqs until as many were answered OK (an item
// whose first decision ran out of BACKEND_TIMEOUT is asked again on the
// next pass), fails t if that takes longer than primeTimeout, and logs how
// long it took (and returns it, for the report).
func prime(t *testing.T, svc *envoytest.Service, reqs []*pb.RateLimitRequest, maxConns int) string {
	t.Helper()
	p := dial(t, svc.GRPCAddr(), min(primeCallers, maxConns))
	defer p.close()
	start := time.Now()
	l := drive(p, primeCallers, reqs, false, 0, len(reqs))
	if l.ok < int64(len(reqs)) || time.Since(start) > primeTimeout {
		t.Fatalf("priming %d items: %d OK, %d OVER_LIMIT, %d errors (first: %s) in %v",
			len(reqs), l.ok, l.over, l.failed, cmp.Or(l.firstErr, "none"), time.Since(start))
	}
	note := fmt.Sprintf("%d items primed first by %d callers in %.0f s, %.0f admitted/s, %d other answers",
		len(reqs), primeCallers, l.secs, float64(l.ok)/l.secs, l.over+l.failed)
	t.Log(note)
	return note
}

// pool is n gRPC connections to the service, a client on each.
type pool struct {
	conns   []*grpc.ClientConn
	clients []pb.RateLimitServiceClient
}

// warmJVM drives DynamoDB Local through svc for jvmWarmup with
// primeCallers callers, each call on a new item (values of the item rule
// no scenario uses), so that reads and writes both run while its JVM
// compiles them. It returns what it did, for the report.
func warmJVM(t *testing.T, svc *envoytest.Service, maxConns int) string {
	t.Helper()
	values := make([]string, 100000)
	for i := range values {
		values[i] = "jvm" + strconv.Itoa(i)
	}
	p := dial(t, svc.GRPCAddr(), min(primeCallers, maxConns))
	defer p.close()
	l := drive(p, primeCallers, requests(scenario{key: "item", values: values}), false, jvmWarmup, 0)
	note := fmt.Sprintf("DynamoDB Local's JVM warmed up first on %d new items in %.0f s, %d other answers", l.ok, l.secs, l.over+l.failed)
	t.Log(note)
	return note
}

// dial opens n gRPC connections to addr.
func dial(t *testing.T, addr string, n int) pool {
	t.Helper()
	var p pool
	for range n {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		cc.Connect()
		p.conns = append(p.conns, cc)
		p.clients = append(p.clients, pb.NewRateLimitServiceClient(cc))
	}
	return p
}

func (p pool) close() {
	for _, cc := range p.conns {
		_ = cc.Close()
	}
}

// drive runs callers spread over p's connections, each sending one call at
// a time, the next request of reqs (cycled in order across all callers)
// each time, until d has passed and at least minOK calls were answered OK
// (or primeTimeout more has passed). It returns what they saw; latencies
// are kept of OK answers, and of OVER_LIMIT ones when refuses.
func drive(p pool, callers int, reqs []*pb.RateLimitRequest, refuses bool, d time.Duration, minOK int) load {
	var next, answeredOK atomic.Int64
	var mu sync.Mutex
	var l load
	var wg sync.WaitGroup
	start := time.Now()
	deadline, stop := start.Add(d), start.Add(d+primeTimeout)
	for c := range callers {
		client := p.clients[c%len(p.clients)]
		wg.Go(func() {
			var ok, over, failed int64
			var firstErr string
			lat := make([]time.Duration, 0, 4096)
			for now := time.Now(); (now.Before(deadline) || answeredOK.Load() < int64(minOK)) && now.Before(stop); now = time.Now() {
				req := reqs[(next.Add(1)-1)%int64(len(reqs))]
				ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
				t0 := time.Now()
				resp, err := client.ShouldRateLimit(ctx, req)
				took := time.Since(t0)
				cancel()
				switch {
				case err != nil:
					failed++
					if firstErr == "" {
						firstErr = err.Error()
					}
					continue
				case resp.GetOverallCode() == pb.RateLimitResponse_OK:
					ok++
					lat = append(lat, took)
					answeredOK.Add(1)
				default:
					over++
					if refuses {
						lat = append(lat, took)
					}
				}
			}
			mu.Lock()
			l.ok, l.over, l.failed = l.ok+ok, l.over+over, l.failed+failed
			if l.firstErr == "" {
				l.firstErr = firstErr
			}
			l.lat = append(l.lat, lat...)
			mu.Unlock()
		})
	}
	wg.Wait()
	l.secs = time.Since(start).Seconds()
	return l
}

// snap reads the CPU of pids, the machine's busy time and the service's
// metrics.
func snap(t *testing.T, svc *envoytest.Service, pids map[string]int) snapshot {
	t.Helper()
	s := snapshot{ticks: map[string]int64{}, metrics: svc.Metrics(t)}
	for name, pid := range pids {
		if pid != 0 {
			s.ticks[name] = benchenv.CPUTicks(t, pid)
		}
	}
	s.busy = busyTicks(t)
	return s
}

// busyTicks returns the busy clock ticks of every CPU: user, nice, system,
// irq, softirq and steal of /proc/stat's cpu line.
func busyTicks(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		t.Fatal(err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		t.Fatalf("/proc/stat: unexpected first line %q", line)
	}
	var n int64
	for _, i := range []int{1, 2, 3, 6, 7, 8} {
		v, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			t.Fatalf("/proc/stat: %q: %v", line, err)
		}
		n += v
	}
	return n
}

// localPid is DynamoDB Local's process; the benchmark's point is its CPU,
// so without it the run fails.
func localPid(t *testing.T, endpoint string) int {
	t.Helper()
	pid, ok := benchenv.DynamoDBLocalPid(t, endpoint)
	if !ok {
		t.Fatalf("no DynamoDB Local process serves %s (DYNAMODB_ENDPOINT names an endpoint this benchmark did not start?): its CPU cannot be read", endpoint)
	}
	return pid
}

// profile, when PROFILE names a directory, records a CPU profile of the
// service over the measured run into PROFILE/<name>.pprof; the returned
// func waits for it.
func profile(t *testing.T, svc *envoytest.Service, name string, d time.Duration) func() {
	t.Helper()
	dir := os.Getenv("PROFILE")
	if dir == "" {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		url := fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/profile?seconds=%d", svc.DebugPort, int(d.Seconds()))
		resp, err := http.Get(url)
		if err != nil {
			t.Errorf("profile %s: %v", name, err)
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("%s: %s", resp.Status, body)
		}
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, name+".pprof"), body, 0o644)
		}
		if err != nil {
			t.Errorf("profile %s: %v", name, err)
		}
	}()
	return func() { <-done }
}
