//go:build envoybench

package envoyload

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/internal/bench/benchenv"
	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/internal/envoytest"
	"github.com/dynalimit/dynalimit/internal/testutil"
)

const (
	bootstrap = "internal/bench/envoyload/testdata/envoy-bench.yaml"
	configDir = "internal/bench/envoyload/testdata/config"
	// llmBootstrap and llmConfigDir are the LLM gateway example, with
	// limits no load reaches: each request is admitted on an estimate and
	// settled through Envoy's access log ("llm"), or not ("llm-nolog").
	llmBootstrap = "examples/envoy/envoy-llm.yaml"
	llmConfigDir = "internal/bench/envoyload/testdata/llm"
	// clkTck is the kernel's USER_HZ (getconf CLK_TCK), the unit of
	// /proc/PID/stat times.
	clkTck = 100
)

// result is one measured run.
type result struct {
	round     int
	setup     string
	conns     int
	requests  int
	bad       int // transport errors and non-200 answers
	seconds   float64
	p50, p99  time.Duration
	cpu       map[string]float64    // process → µs of CPU per request
	decisions envoytest.FilterStats // Envoy's cluster.app.ratelimit.* over the run
}

// load is what one measured run of a driver (the Go one here, wrk in
// peers_test.go) reports.
type load struct {
	requests  int // answered 200
	bad       int // transport errors and non-200 answers
	seconds   float64
	p50, p99  time.Duration
	driverCPU time.Duration // the driver's CPU when it is a process of its own
}

func (r result) rps() float64 { return float64(r.requests) / r.seconds }

func TestEnvoyLoad(t *testing.T) {
	duration := benchenv.Duration(t, "DURATION", 10*time.Second)
	warmup := benchenv.Duration(t, "WARMUP", 2*time.Second)
	conns := benchenv.Ints(t, "CONNS", "1,16,64")
	setups := strings.Split(benchenv.Or("SETUPS", "none,trivial,memory,dynamodb"), ",") // and llm, llm-nolog
	rounds := benchenv.Ints(t, "ROUNDS", "1")[0]
	t.Logf("load average at start: %s", benchenv.LoadAvg())

	var results []result
	for round := 1; round <= rounds; round++ {
		for _, s := range setups {
			t.Run(fmt.Sprintf("round %d %s", round, s), func(t *testing.T) {
				r, pids := start(t, s)
				path, hdr := request(s)
				for _, c := range conns {
					run(r.URL(path), c, warmup, hdr)
					res := measure(t, r, pids, s, c, func() load { return goLoad(r.URL(path), c, duration, hdr) })
					res.round = round
					t.Logf("%s, %d connections: %.0f req/s, p50 %v, p99 %v, %d bad, cpu µs/req %v",
						s, c, res.rps(), res.p50, res.p99, res.bad, res.cpu)
					// DynamoDB Local serialises writes: past its pace,
					// decisions run out of BACKEND_TIMEOUT and are refused
					// (ON_UNAVAILABLE=block). That is reported, not a failure.
					if res.bad > 0 && s != "dynamodb" {
						t.Errorf("%d of %d requests were not answered 200", res.bad, res.requests+res.bad)
					}
					if s != "none" && s != "dynamodb" && res.decisions.OK < uint64(res.requests) {
						t.Errorf("envoy counted %d OK decisions for %d requests", res.decisions.OK, res.requests)
					}
					results = append(results, res)
				}
			})
		}
	}
	t.Logf("load average at end: %s", benchenv.LoadAvg())
	out := report(results, duration, warmup)
	fmt.Print(out)
	if f := os.Getenv("BENCH_OUT"); f != "" {
		if err := os.WriteFile(f, []byte(out), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// start runs Envoy for one setup and returns the pids to account CPU to.
func start(t *testing.T, setup string) (*envoytest.Rig, map[string]int) {
	t.Helper()
	pids := map[string]int{}
	var r *envoytest.Rig
	switch setup {
	case "none":
		r = envoytest.Start(t, envoytest.Options{Bootstrap: bootstrap, ServiceAddr: "127.0.0.1:1",
			Edits: []envoytest.Edit{envoytest.RemoveFilter("envoy.filters.http.ratelimit")}})
	case "trivial":
		addr, pid := startTrivial(t)
		r = envoytest.Start(t, envoytest.Options{Bootstrap: bootstrap, ServiceAddr: addr})
		pids["rls"] = pid
	case "memory":
		r = envoytest.Start(t, envoytest.Options{Bootstrap: bootstrap, ConfigDir: configDir})
		pids["rls"] = r.Service.Pid()
	case "llm", "llm-nolog":
		o := envoytest.Options{Bootstrap: llmBootstrap, ConfigDir: llmConfigDir, Env: []string{"LEASE_SIGNING_KEY=" + strings.Repeat("k", 32)}}
		if setup == "llm-nolog" {
			o.Edits = []envoytest.Edit{envoytest.RemoveAccessLog()}
		}
		r = envoytest.Start(t, o)
		pids["rls"] = r.Service.Pid()
	case "dynamodb":
		local := dynamotest.Start(t)
		env := []string{
			"BACKEND_TYPE=dynamodb", "DYNAMODB_ENDPOINT=" + local.Endpoint(),
			"DYNAMODB_TABLE=" + dynamotest.TableName(t), "AWS_REGION=us-east-1",
			"BACKEND_TIMEOUT=500ms", "ON_UNAVAILABLE=block",
		}
		envoytest.RunBinary(t, env, "table", "create")
		r = envoytest.Start(t, envoytest.Options{Bootstrap: bootstrap, ConfigDir: configDir, Env: env})
		pids["rls"] = r.Service.Pid()
		if pid, ok := benchenv.DynamoDBLocalPid(t, local.Endpoint()); ok {
			pids["dynamodb-local"] = pid
		} else {
			t.Logf("DynamoDB Local's process not found; its CPU is not reported")
		}
	default:
		t.Fatalf("unknown setup %q (none, trivial, memory, dynamodb, llm, llm-nolog)", setup)
	}
	pids["envoy"] = r.Envoy.Pid()
	pids["driver+upstream"] = os.Getpid()
	return r, pids
}

// request is the path and headers of a setup's requests: the LLM
// gateway's name a chain and report a cost.
func request(setup string) (string, http.Header) {
	if !strings.HasPrefix(setup, "llm") {
		return "/", nil
	}
	h := http.Header{}
	h.Set("x-tenant", "acme")
	h.Set("x-project", "web")
	h.Set("x-api-key", "key-1")
	return "/v1/chat?header=x-llm-tokens:700", h
}

// measure runs drive once and accounts the CPU of pids and Envoy's
// rate-limit decisions over it.
func measure(t *testing.T, r *envoytest.Rig, pids map[string]int, setup string, conns int, drive func() load) result {
	t.Helper()
	before := map[string]int64{}
	for name, pid := range pids {
		before[name] = benchenv.CPUTicks(t, pid)
	}
	st0 := r.Envoy.RateLimitStats(t, "app")
	l := drive()
	res := result{setup: setup, conns: conns, requests: l.requests, bad: l.bad, seconds: l.seconds,
		p50: l.p50, p99: l.p99, cpu: map[string]float64{}}
	n := float64(max(l.requests, 1))
	for name, pid := range pids {
		ticks := benchenv.CPUTicks(t, pid) - before[name]
		res.cpu[name] = float64(ticks) / clkTck * 1e6 / n
	}
	if l.driverCPU > 0 {
		res.cpu["driver"] = float64(l.driverCPU.Microseconds()) / n
	}
	res.decisions = r.Envoy.RateLimitStats(t, "app").Sub(st0)
	return res
}

// goLoad is one run of the Go driver (run), with its percentiles.
func goLoad(target string, conns int, d time.Duration, hdr http.Header) load {
	lat, bad, secs := run(target, conns, d, hdr)
	l := load{requests: len(lat), bad: bad, seconds: secs}
	slices.Sort(lat)
	if len(lat) > 0 {
		l.p50 = lat[len(lat)*50/100]
		l.p99 = lat[min(len(lat)*99/100, len(lat)-1)]
	}
	return l
}

// run sends GET requests on conns connections, one at a time on each, for
// d, and returns the latencies of the 200 answers, the number of other
// outcomes and the elapsed seconds. Each request carries hdr.
func run(target string, conns int, d time.Duration, hdr http.Header) ([]time.Duration, int, float64) {
	var wg sync.WaitGroup
	lats := make([][]time.Duration, conns)
	bads := make([]int, conns)
	start := time.Now()
	deadline := start.Add(d)
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tr := &http.Transport{MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1, DisableCompression: true}
			defer tr.CloseIdleConnections()
			c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
			lat := make([]time.Duration, 0, 1<<14)
			for time.Now().Before(deadline) {
				t0 := time.Now()
				req, _ := http.NewRequest(http.MethodGet, target, nil)
				req.Header = hdr.Clone()
				resp, err := c.Do(req)
				if err != nil {
					bads[i]++
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					bads[i]++
					continue
				}
				lat = append(lat, time.Since(t0))
			}
			lats[i] = lat
		}()
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	var all []time.Duration
	bad := 0
	for i := range conns {
		all = append(all, lats[i]...)
		bad += bads[i]
	}
	return all, bad, secs
}

// startTrivial builds and runs internal/bench/trivialrls on a free port.
func startTrivial(t *testing.T) (string, int) {
	t.Helper()
	bin := testutil.Build(t, "./internal/bench/trivialrls")
	addr := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	p := testutil.StartProcess(t, "trivialrls", exec.Command(bin, "-addr", addr), testutil.Accepting(addr))
	return addr, p.Pid()
}

// report formats the results as Markdown tables.
func report(results []result, d, warm time.Duration) string {
	var b strings.Builder
	ms := func(x time.Duration) string { return fmt.Sprintf("%.2f", float64(x)/float64(time.Millisecond)) }
	cpu := func(r result, p string) string {
		if v, ok := r.cpu[p]; ok {
			return fmt.Sprintf("%.0f", v)
		}
		return "–"
	}
	fmt.Fprintf(&b, "\n%d s measured after %d s warm-up per run; load average at the end %s\n\n", int(d.Seconds()), int(warm.Seconds()), benchenv.LoadAvg())
	b.WriteString("| round | setup | connections | requests/s | p50 ms | p99 ms | not 200 | Envoy CPU µs/req | RLS CPU µs/req | DynamoDB Local CPU µs/req | driver+upstream CPU µs/req |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range results {
		fmt.Fprintf(&b, "| %d | %s | %d | %.0f | %s | %s | %d | %s | %s | %s | %s |\n", r.round, r.setup, r.conns, r.rps(),
			ms(r.p50), ms(r.p99), r.bad, cpu(r, "envoy"), cpu(r, "rls"), cpu(r, "dynamodb-local"), cpu(r, "driver+upstream"))
	}
	find := func(round int, setup string, conns int) (result, bool) {
		for _, r := range results {
			if r.round == round && r.setup == setup && r.conns == conns {
				return r, true
			}
		}
		return result{}, false
	}
	b.WriteString("\n| round | setup | connections | throughput vs baseline | p99 vs baseline | added p50 ms | added p99 ms |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|\n")
	for _, r := range results {
		baseline := map[string]string{"memory": "trivial", "dynamodb": "trivial", "llm": "llm-nolog"}[r.setup]
		if baseline == "" {
			continue
		}
		base, ok := find(r.round, baseline, r.conns)
		if !ok {
			continue
		}
		fmt.Fprintf(&b, "| %d | %s | %d | %.2f | %.2f | %s | %s |\n", r.round, r.setup, r.conns, r.rps()/base.rps(),
			float64(r.p99)/float64(base.p99), ms(r.p50-base.p50), ms(r.p99-base.p99))
	}
	return b.String()
}
