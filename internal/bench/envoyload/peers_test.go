//go:build envoybench

package envoyload

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/dynalimit/dynalimit/internal/bench/benchenv"
	"github.com/dynalimit/dynalimit/internal/envoytest"
	"github.com/dynalimit/dynalimit/internal/testutil"
)

// The descriptor every server is asked about: domain bench, one entry
// api_key=<x-api-key header>, one hot value for the whole load.
const (
	peersDomain   = "bench"
	descriptorKey = "api_key"
	apiKeyHeader  = "x-api-key"
	hotKey        = "hot"
	wrkScript     = "internal/bench/envoyload/testdata/wrk-report.lua"
	peersScript   = "internal/bench/peers.sh"
	grpcScript    = "internal/bench/grpc.sh"
)

// allServers are the servers of the side-by-side, in the order of round 1.
var allServers = []string{"ours", "ours-redis", "noop", "limitador", "envoyratelimit"}

// oursVariants are ours with other settings, run only when SERVERS names
// them: what grpc-go's server and a lazier collector change, measured in
// the same run.
var oursVariants = map[string][]string{
	"ours-grpcgo":  {"GRPC_TRANSPORT=grpc-go"},
	"ours-gogc400": {"GOGC=400"},
	"ours-nostats": {"DISABLE_STATS=true"},
}

// apiKeyRateLimits are the route's rate_limits of the side-by-side: one
// descriptor api_key=<x-api-key> per request.
var apiKeyRateLimits = []any{map[string]any{"actions": []any{map[string]any{
	"request_headers": map[string]any{"header_name": apiKeyHeader, "descriptor_key": descriptorKey},
}}}}

// rule is the one limit every server gets for each api_key value.
type rule struct {
	perUnit int64
	unit    string // second or minute
}

var (
	// benchRule never refuses: every decision of the timed runs is an
	// admission, a real debit of one hot counter.
	benchRule = rule{1_000_000_000, "second"}
	// checkRule refuses the second request of a key: the check that the
	// descriptor reached the server.
	checkRule = rule{1, "minute"}
)

// releaseServer is ours as another build of it runs (RELEASE_BIN, say the
// last release's), run only when SERVERS names it: the same run measures
// this tree against it.
const releaseServer = "ours-release"

// releaseBin is RELEASE_BIN, which SERVERS=...,ours-release needs.
func releaseBin(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("RELEASE_BIN")
	if bin == "" {
		t.Fatalf("SERVERS names %s: set RELEASE_BIN to a ratelimit binary (git worktree add /tmp/rel TAG && go build -C /tmp/rel -o /tmp/ratelimit-release ./cmd/ratelimit)", releaseServer)
	}
	if st, err := os.Stat(bin); err != nil || st.IsDir() {
		t.Fatalf("RELEASE_BIN=%s is not a file: %v", bin, err)
	}
	return bin
}

// descriptorYAML is the rule in the descriptor format that ours and
// envoyproxy/ratelimit read.
func (r rule) descriptorYAML() string {
	return fmt.Sprintf("domain: %s\ndescriptors:\n  - key: %s\n    rate_limit:\n      unit: %s\n      requests_per_unit: %d\n",
		peersDomain, descriptorKey, r.unit, r.perUnit)
}

// limitadorYAML is the rule as a Limitador limits file: one counter per
// value of the first descriptor's api_key entry.
func (r rule) limitadorYAML() string {
	secs := map[string]int{"second": 1, "minute": 60}[r.unit]
	return fmt.Sprintf("- namespace: %s\n  max_value: %d\n  seconds: %d\n  conditions: []\n  variables:\n    - descriptors[0].%s\n",
		peersDomain, r.perUnit, secs, descriptorKey)
}

// peerSet is what internal/bench/peers.sh located: the binaries found and,
// for the others, what to do to get them.
type peerSet struct {
	found   map[string]string // name → path
	missing map[string]string // name → what to do
}

func locatePeers(t *testing.T, root string) peerSet {
	t.Helper()
	cmd := exec.Command("bash", peersScript, "locate")
	cmd.Dir = root
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("bash %s locate: %v", peersScript, err)
	}
	p := peerSet{found: map[string]string{}, missing: map[string]string{}}
	for line := range strings.Lines(string(out)) {
		f := strings.SplitN(strings.TrimRight(line, "\n"), "\t", 3)
		if len(f) != 3 {
			t.Fatalf("%s locate printed %q", peersScript, line)
		}
		if f[1] == "found" {
			p.found[f[0]] = f[2]
		} else {
			p.missing[f[0]] = f[2]
		}
	}
	// envoyproxy/ratelimit runs on Redis: without one it is missing too.
	if why, ok := p.missing["redis-server"]; ok && p.found["envoyratelimit"] != "" {
		delete(p.found, "envoyratelimit")
		p.missing["envoyratelimit"] = why
	}
	return p
}

// about describes a found peer for the report: its path, its own version
// string where it has one, and the NAME.txt peers.sh wrote beside it.
func (p peerSet) about(name string) string {
	bin := p.found[name]
	s := bin
	if name == "limitador" {
		if out, err := exec.Command(bin, "--version").Output(); err == nil {
			s += "; " + strings.Join(strings.Fields(string(out)), " ")
		}
	}
	if b, err := os.ReadFile(bin + ".txt"); err == nil {
		s += "; " + strings.Join(strings.Split(strings.TrimSpace(string(b)), "\n"), "; ")
	}
	return s
}

// rls is one rate-limit server running for a run.
type rls struct {
	name string
	addr string // gRPC, host:port
	pid  int
	// helper is a process that does the server's work too (Redis for
	// envoyproxy/ratelimit); its CPU is reported beside the server's.
	helper    string
	helperPid int
}

// startRLS starts the named server with rule r on free loopback ports; it
// stops at t's cleanup.
func startRLS(t *testing.T, name string, peers peerSet, r rule) rls {
	t.Helper()
	dir := t.TempDir()
	write := func(path, text string) {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	addr := func(port int) string { return fmt.Sprintf("127.0.0.1:%d", port) }
	both := func(a, b func() bool) func() bool { return func() bool { return a() && b() } }
	startRedis := func() (string, int) {
		port := testutil.FreePort(t)
		redis := testutil.StartProcess(t, "redis-server", exec.Command(peers.found["redis-server"],
			"--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no"),
			testutil.Accepting(addr(port)))
		return addr(port), redis.Pid()
	}
	if name == "ours-redis" {
		// Ours on the Redis store, on a redis-server like envoyproxy/ratelimit's.
		redis, pid := startRedis()
		write(filepath.Join(dir, "bench.yaml"), r.descriptorYAML())
		s := envoytest.StartService(t, dir, "BACKEND_TYPE=redis", "REDIS_URL="+redis)
		return rls{name: name, addr: s.GRPCAddr(), pid: s.Pid(), helper: "redis", helperPid: pid}
	}
	if env, ok := oursVariants[name]; ok || name == "ours" {
		write(filepath.Join(dir, "bench.yaml"), r.descriptorYAML())
		s := envoytest.StartService(t, dir, env...)
		return rls{name: name, addr: s.GRPCAddr(), pid: s.Pid()}
	}
	if name == releaseServer {
		// Another build of ours (the last release), as StartService runs
		// this tree's.
		write(filepath.Join(dir, "bench.yaml"), r.descriptorYAML())
		s := testutil.StartServer(t, testutil.ServerOptions{
			Bin:       releaseBin(t),
			Args:      []string{"serve", "-config_dir", dir},
			Env:       []string{"SHUTDOWN_DRAIN=0s", "LOG_FORMAT=text", "LOG_LEVEL=warn"},
			StopGrace: 10 * time.Second,
		})
		return rls{name: name, addr: s.GRPCAddr(), pid: s.Pid()}
	}
	switch name {
	case "noop":
		a, pid := startTrivial(t)
		return rls{name: name, addr: a, pid: pid}
	case "limitador":
		limits := filepath.Join(dir, "limits.yaml")
		write(limits, r.limitadorYAML())
		grpcAddr, httpPort := addr(testutil.FreePort(t)), testutil.FreePort(t)
		// DRAFT_VERSION_03: Limitador sends the X-RateLimit-* headers
		// itself; the others send the counts Envoy makes them from
		// (enable_x_ratelimit_headers), so every 200 carries them.
		cmd := exec.Command(peers.found[name],
			"--rls-ip", "127.0.0.1", "--rls-port", strings.TrimPrefix(grpcAddr, "127.0.0.1:"),
			"--http-ip", "127.0.0.1", "--http-port", strconv.Itoa(httpPort),
			"--rate-limit-headers", "DRAFT_VERSION_03",
			limits, "memory")
		p := testutil.StartProcess(t, "limitador", cmd, both(testutil.Accepting(grpcAddr),
			testutil.Answers200(fmt.Sprintf("http://127.0.0.1:%d/status", httpPort))))
		return rls{name: name, addr: grpcAddr, pid: p.Pid()}
	case "envoyratelimit":
		redis, redisPid := startRedis()
		write(filepath.Join(dir, "ratelimit", "config", "bench.yaml"), r.descriptorYAML())
		grpcPort, httpPort, debugPort := testutil.FreePort(t), testutil.FreePort(t), testutil.FreePort(t)
		cmd := exec.Command(peers.found[name])
		cmd.Env = append(os.Environ(),
			"RUNTIME_ROOT="+dir, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
			"USE_STATSD=false", "LOG_LEVEL=warn",
			"REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+redis,
			"GRPC_HOST=127.0.0.1", "GRPC_PORT="+strconv.Itoa(grpcPort),
			"HOST=127.0.0.1", "PORT="+strconv.Itoa(httpPort),
			"DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+strconv.Itoa(debugPort),
		)
		p := testutil.StartProcess(t, "envoyratelimit", cmd, both(testutil.Accepting(addr(grpcPort)),
			testutil.Answers200(fmt.Sprintf("http://127.0.0.1:%d/healthcheck", httpPort))))
		return rls{name: name, addr: addr(grpcPort), pid: p.Pid(), helper: "redis", helperPid: redisPid}
	}
	t.Fatalf("unknown server %q (%s)", name, strings.Join(allServers, ", "))
	return rls{}
}

// startPeerEnvoy runs the side-by-side's Envoy in front of s: the
// benchmark's bootstrap, with the route asking for api_key=<x-api-key>.
func startPeerEnvoy(t *testing.T, s rls) *envoytest.Rig {
	t.Helper()
	return envoytest.Start(t, envoytest.Options{Bootstrap: bootstrap, ServiceAddr: s.addr,
		Edits: []envoytest.Edit{envoytest.SetRateLimits(apiKeyRateLimits)}})
}

// checkDescriptor proves that s sees the descriptor, before anything is
// timed: with checkRule, the second request of a key is refused, through
// Envoy (200 then 429, and Envoy counts one OK and one OVER_LIMIT decision)
// and over gRPC directly (OK then OVER_LIMIT). The no-op server refuses
// nothing by design; it must answer OK to all four.
func checkDescriptor(t *testing.T, s rls) {
	t.Helper()
	r := startPeerEnvoy(t, s)
	c := envoytest.Client(t, "127.0.0.1")
	want := []int{http.StatusOK, http.StatusTooManyRequests}
	wantCodes := []pb.RateLimitResponse_Code{pb.RateLimitResponse_OK, pb.RateLimitResponse_OVER_LIMIT}
	if s.name == "noop" {
		want = []int{http.StatusOK, http.StatusOK}
		wantCodes = []pb.RateLimitResponse_Code{pb.RateLimitResponse_OK, pb.RateLimitResponse_OK}
	}
	st0 := r.Envoy.RateLimitStats(t, "app")
	for i, w := range want {
		resp := r.Do(t, c, http.MethodGet, "/", apiKeyHeader, "check-http")
		if resp.Status != w {
			t.Errorf("%s through Envoy: request %d of one key answered %d, want %d (headers %v)", s.name, i+1, resp.Status, w, resp.Header)
		}
		if i == 0 && s.name != "noop" && resp.Header.Get("X-Ratelimit-Limit") == "" {
			t.Errorf("%s through Envoy: the 200 carries no X-RateLimit-Limit header (headers %v)", s.name, resp.Header)
		}
	}
	st := r.Envoy.RateLimitStats(t, "app").Sub(st0)
	wantStats := envoytest.FilterStats{OK: 1, OverLimit: 1}
	if s.name == "noop" {
		wantStats = envoytest.FilterStats{OK: 2}
	}
	if st != wantStats {
		t.Errorf("%s: Envoy counted %v, want %v", s.name, st, wantStats)
	}

	cc, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := pb.NewRateLimitServiceClient(cc)
	req := &pb.RateLimitRequest{Domain: peersDomain, HitsAddend: 1, Descriptors: []*rlcommon.RateLimitDescriptor{{
		Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: descriptorKey, Value: "check-grpc"}},
	}}}
	for i, w := range wantCodes {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := client.ShouldRateLimit(ctx, req)
		cancel()
		if err != nil {
			t.Fatalf("%s over gRPC: ShouldRateLimit: %v", s.name, err)
		}
		if got := resp.GetOverallCode(); got != w {
			t.Errorf("%s over gRPC: call %d of one key answered %v, want %v", s.name, i+1, got, w)
		}
	}
}

// wrkLoad runs wrk (2 threads, conns connections, whole seconds) against
// url with the hot api key and returns its report; raw, when not nil,
// receives wrk's own output.
func wrkLoad(t *testing.T, wrk, script, url string, conns int, d time.Duration, raw *bytes.Buffer) load {
	t.Helper()
	cmd := exec.Command(wrk, "-t2", "-c"+strconv.Itoa(conns), fmt.Sprintf("-d%ds", int(d.Seconds())),
		"--timeout", "5s", "--latency", "-H", apiKeyHeader+": "+hotKey, "-s", script, url)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("wrk: %v\n%s", err, out)
	}
	if raw != nil {
		raw.Write(out)
	}
	var line string
	for l := range strings.Lines(string(out)) {
		if after, ok := strings.CutPrefix(l, "WRK-REPORT "); ok {
			line = after
		}
	}
	v := map[string]int64{}
	for _, f := range strings.Fields(line) {
		k, s, _ := strings.Cut(f, "=")
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("wrk report %q: %v", line, err)
		}
		v[k] = n
	}
	for _, k := range []string{"requests", "duration_us", "status", "connect", "read", "write", "timeout", "p50_us", "p99_us"} {
		if _, ok := v[k]; !ok {
			t.Fatalf("wrk printed no %s in its report:\n%s", k, out)
		}
	}
	notOK := v["status"] + v["connect"] + v["read"] + v["write"] + v["timeout"]
	return load{
		requests:  int(v["requests"] - v["status"]),
		bad:       int(notOK),
		seconds:   float64(v["duration_us"]) / 1e6,
		p50:       time.Duration(v["p50_us"]) * time.Microsecond,
		p99:       time.Duration(v["p99_us"]) * time.Microsecond,
		driverCPU: cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(),
	}
}

// TestPeers is `make bench-peers`: ours, the no-op server, Limitador and
// envoyproxy/ratelimit, each in turn behind the same Envoy and driven by
// wrk, then over gRPC directly with ghz (internal/bench/grpc.sh). See
// BENCHMARKS.md, "Side by side with Limitador and envoyproxy/ratelimit".
func TestPeers(t *testing.T) {
	duration := benchenv.Duration(t, "DURATION", 10*time.Second)
	warmup := benchenv.Duration(t, "WARMUP", 2*time.Second)
	if duration < time.Second || warmup < time.Second || duration%time.Second != 0 || warmup%time.Second != 0 {
		t.Fatalf("DURATION and WARMUP are whole seconds, at least 1s (wrk's -d), got %v and %v", duration, warmup)
	}
	conns := benchenv.Ints(t, "CONNS", "16,64")
	rounds := benchenv.Ints(t, "ROUNDS", "3")[0]
	g := grpcOptions{callers: benchenv.Ints(t, "CALLERS", "50")[0], pin: pinCores(t)}
	envoy := benchenv.Or("ENVOY", "1")
	if envoy != "0" && envoy != "1" {
		t.Fatalf("ENVOY is 1 (the runs through Envoy, then over gRPC) or 0 (over gRPC only), got %q", envoy)
	}
	if envoy == "0" {
		conns = nil
	}
	root := testutil.RepoRoot(t)
	out := os.Getenv("BENCH_OUT")
	if out != "" {
		if err := os.MkdirAll(filepath.Join(out, "wrk"), 0o755); err != nil {
			t.Fatal(err)
		}
	}

	peers := locatePeers(t, root)
	if why, ok := peers.missing["wrk"]; ok {
		t.Fatalf("wrk drives the HTTP load and is missing: %s", why)
	}
	servers, notes := chooseServers(t, peers)
	for _, n := range notes {
		t.Log(n)
	}
	t.Logf("servers: %s; load average at start: %s", strings.Join(servers, ", "), benchenv.LoadAvg())

	for _, name := range servers {
		t.Run("check "+name, func(t *testing.T) { checkDescriptor(t, startRLS(t, name, peers, checkRule)) })
	}
	if t.Failed() {
		t.Fatal("a server did not see the descriptor; nothing is timed")
	}

	script := filepath.Join(root, wrkScript)
	var results []result
	for round := 1; round <= rounds && len(conns) > 0; round++ {
		for k := range servers {
			name := servers[(k+round-1)%len(servers)] // round r starts with the r-th server
			t.Run(fmt.Sprintf("round %d %s", round, name), func(t *testing.T) {
				s := startRLS(t, name, peers, benchRule)
				r := startPeerEnvoy(t, s)
				pids := map[string]int{"rls": s.pid, "envoy": r.Envoy.Pid(), "upstream": os.Getpid()}
				if s.helperPid != 0 {
					pids[s.helper] = s.helperPid
				}
				for _, c := range conns {
					wrkLoad(t, peers.found["wrk"], script, r.URL("/"), c, warmup, nil)
					var raw bytes.Buffer
					res := measure(t, r, pids, name, c, func() load {
						return wrkLoad(t, peers.found["wrk"], script, r.URL("/"), c, duration, &raw)
					})
					res.round = round
					t.Logf("%s, %d connections: %.0f req/s, p50 %v, p99 %v, %d not 200, cpu µs/req %v",
						name, c, res.rps(), res.p50, res.p99, res.bad, res.cpu)
					if res.bad > 0 {
						t.Errorf("%d of %d requests were not answered 200", res.bad, res.requests+res.bad)
					}
					if d := res.decisions; d.OK < uint64(res.requests) || d.OverLimit+d.Error+d.FailureModeAllowed > 0 {
						t.Errorf("envoy counted %v for %d requests answered 200", d, res.requests)
					}
					if out != "" {
						f := filepath.Join(out, "wrk", fmt.Sprintf("round%d-%s-%dconns.txt", round, name, c))
						if err := os.WriteFile(f, raw.Bytes(), 0o644); err != nil {
							t.Error(err)
						}
					}
					results = append(results, res)
				}
			})
		}
	}

	var grpcTables string
	t.Run("grpc", func(t *testing.T) { grpcTables = grpcPeers(t, root, servers, peers, rounds, duration, warmup, out, g) })

	var b strings.Builder
	fmt.Fprintf(&b, "\n## Side by side: %s\n\n", strings.Join(servers, ", "))
	fmt.Fprintf(&b, "Machine: %d cores; load average at the end %s.\n\n", runtime.NumCPU(), benchenv.LoadAvg())
	for _, name := range servers {
		switch {
		case name == "ours":
			fmt.Fprintf(&b, "- ours: go build ./cmd/ratelimit of this tree, %s\n", treeCommit(root))
		case oursVariants[name] != nil:
			fmt.Fprintf(&b, "- %s: ours with %s\n", name, strings.Join(oursVariants[name], " "))
		case name == releaseServer:
			fmt.Fprintf(&b, "- %s: %s\n", name, os.Getenv("RELEASE_BIN"))
		case name == "noop":
			b.WriteString("- noop: go build ./internal/bench/trivialrls of this tree\n")
		default:
			fmt.Fprintf(&b, "- %s: %s\n", name, peers.about(name))
		}
	}
	for _, n := range notes {
		fmt.Fprintf(&b, "- %s\n", n)
	}
	if len(conns) > 0 {
		b.WriteString(peersReport(results, servers, duration, warmup))
	}
	fmt.Fprintf(&b, "\n### gRPC direct (ghz, %d callers, one connection, one hot key%s)\n", g.callers, g.pin.about())
	b.WriteString(grpcTables)
	fmt.Print(b.String())
	if out != "" {
		if err := os.WriteFile(filepath.Join(out, "peers.md"), []byte(b.String()), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// chooseServers returns the servers to run (SERVERS, default every one
// found) and a note for each default one that is missing, with what to do.
// A server SERVERS names that is missing fails the test.
func chooseServers(t *testing.T, peers peerSet) ([]string, []string) {
	t.Helper()
	var servers, notes []string
	asked := os.Getenv("SERVERS")
	names := allServers
	if asked != "" {
		names = strings.Split(asked, ",")
	}
	for _, name := range names {
		name = strings.TrimSpace(name)
		if !slices.Contains(allServers, name) && oursVariants[name] == nil && name != releaseServer {
			t.Fatalf("SERVERS: unknown server %q (%s, ours-grpcgo, ours-gogc400, ours-nostats, %s)", name, strings.Join(allServers, ", "), releaseServer)
		}
		if why, ok := peers.missing[name]; ok {
			if asked != "" {
				t.Fatalf("SERVERS names %s, which is missing: %s", name, why)
			}
			notes = append(notes, fmt.Sprintf("MISSING, not run: %s: %s", name, why))
			continue
		}
		servers = append(servers, name)
	}
	if len(servers) == 0 {
		t.Fatal("no server to run")
	}
	return servers, notes
}

// grpcOptions shape the runs over gRPC: ghz's callers, and the cores the
// servers and ghz are held to.
type grpcOptions struct {
	callers int
	pin     pinning
}

// pinning holds each server and its helper (its Redis) to one core and the
// load driver to another (PIN_GRPC=SERVERS,DRIVER), so that every server
// has the same CPU and the driver's is not theirs; set is false without
// PIN_GRPC.
type pinning struct {
	set            bool
	server, driver int
}

// pinCores reads PIN_GRPC: two distinct cores of this machine, the
// servers' first. Pinning needs taskset (util-linux).
func pinCores(t *testing.T) pinning {
	t.Helper()
	v := os.Getenv("PIN_GRPC")
	if v == "" {
		return pinning{}
	}
	cpus := runtime.NumCPU()
	var c []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 || n >= cpus {
			n = -1
		}
		c = append(c, n)
	}
	if len(c) != 2 || c[0] < 0 || c[1] < 0 || c[0] == c[1] {
		t.Fatalf("PIN_GRPC is two distinct cores of this machine's %d (0 to %d), the servers' then the driver's, like 1,0; got %q", cpus, cpus-1, v)
	}
	if _, err := exec.LookPath("taskset"); err != nil {
		t.Fatalf("PIN_GRPC needs taskset (util-linux): %v", err)
	}
	return pinning{set: true, server: c[0], driver: c[1]}
}

// about describes p for the report's heading.
func (p pinning) about() string {
	if !p.set {
		return ""
	}
	return fmt.Sprintf("; each server and its Redis on core %d, GOMAXPROCS=1, ghz on core %d", p.server, p.driver)
}

// hold moves every thread of pid to the servers' core.
func (p pinning) hold(t *testing.T, pid int) {
	t.Helper()
	if out, err := exec.Command("taskset", "-a", "-p", "-c", strconv.Itoa(p.server), strconv.Itoa(pid)).CombinedOutput(); err != nil {
		t.Fatalf("taskset -a -p -c %d %d: %v\n%s", p.server, pid, err, out)
	}
}

// grpcPeers starts every server again (benchRule, no Envoy) and runs
// internal/bench/grpc.sh on them (TARGETS): ghz, one hot key, the servers
// alternating in each round. It returns the script's tables.
func grpcPeers(t *testing.T, root string, servers []string, peers peerSet, rounds int, duration, warmup time.Duration, out string, g grpcOptions) string {
	t.Helper()
	if g.pin.set {
		// The Go servers (ours, envoyproxy/ratelimit) and ghz start with
		// one P for their one core.
		t.Setenv("GOMAXPROCS", "1")
	}
	var targets strings.Builder
	for _, name := range servers {
		s := startRLS(t, name, peers, benchRule)
		if g.pin.set {
			g.pin.hold(t, s.pid)
			if s.helperPid != 0 {
				g.pin.hold(t, s.helperPid)
			}
		}
		fmt.Fprintf(&targets, "%s %s %d", s.name, s.addr, s.pid)
		if s.helperPid != 0 {
			fmt.Fprintf(&targets, " %s %d", s.helper, s.helperPid)
		}
		targets.WriteString("\n")
	}
	secs := func(d time.Duration) string { return fmt.Sprintf("%gs", d.Seconds()) }
	cmd := exec.Command("bash", grpcScript)
	if g.pin.set {
		cmd = exec.Command("taskset", "-c", strconv.Itoa(g.pin.driver), "bash", grpcScript)
	}
	cmd.Dir = root
	cmd.Env = append(os.Environ(),
		"TARGETS="+targets.String(), "SCENARIOS=hot", "DESCRIPTOR_KEY="+descriptorKey, "ROTATE=1",
		"CONCURRENCY="+strconv.Itoa(g.callers), "ROUNDS="+strconv.Itoa(rounds), "DURATION="+secs(duration), "WARMUP="+secs(warmup))
	if out != "" {
		cmd.Env = append(cmd.Env, "BENCH_OUT="+filepath.Join(out, "grpc"))
	} else {
		cmd.Env = append(cmd.Env, "BENCH_OUT=")
	}
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Run(); err != nil {
		t.Fatalf("bash %s: %v\n%s", grpcScript, err, stdout.String())
	}
	return stdout.String()
}

// peersReport formats the Envoy runs: every run, then the medians over the
// rounds per server and connection count, then ours against Limitador and
// the no-op server.
func peersReport(results []result, servers []string, d, warm time.Duration) string {
	var b strings.Builder
	ms := func(x time.Duration) string { return fmt.Sprintf("%.2f", float64(x)/float64(time.Millisecond)) }
	us := func(v float64, ok bool) string {
		if !ok {
			return "–"
		}
		return fmt.Sprintf("%.0f", v)
	}
	cpu := func(r result, p string) string { v, ok := r.cpu[p]; return us(v, ok) }
	fmt.Fprintf(&b, "\n### Through Envoy (wrk, 2 threads; %d s measured after %d s warm-up per run)\n\n", int(d.Seconds()), int(warm.Seconds()))
	b.WriteString("| round | server | connections | requests/s | p50 ms | p99 ms | not 200 | RLS CPU µs/req | Redis CPU µs/req | Envoy CPU µs/req | upstream CPU µs/req | wrk CPU µs/req |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range results {
		fmt.Fprintf(&b, "| %d | %s | %d | %.0f | %s | %s | %d | %s | %s | %s | %s | %s |\n", r.round, r.setup, r.conns, r.rps(),
			ms(r.p50), ms(r.p99), r.bad, cpu(r, "rls"), cpu(r, "redis"), cpu(r, "envoy"), cpu(r, "upstream"), cpu(r, "driver"))
	}

	var conns []int
	for _, r := range results {
		if !slices.Contains(conns, r.conns) {
			conns = append(conns, r.conns)
		}
	}
	median := func(v []float64) float64 {
		if len(v) == 0 {
			return 0
		}
		slices.Sort(v)
		if n := len(v); n%2 == 1 {
			return v[n/2]
		} else {
			return (v[n/2-1] + v[n/2]) / 2
		}
	}
	pick := func(server string, c int, f func(result) (float64, bool)) ([]float64, bool) {
		var v []float64
		for _, r := range results {
			if r.setup == server && r.conns == c {
				if x, ok := f(r); ok {
					v = append(v, x)
				}
			}
		}
		return v, len(v) > 0
	}
	fmt.Fprintf(&b, "\nMedians over the rounds:\n\n")
	b.WriteString("| server | connections | requests/s | p50 ms | p99 ms | not 200, total | RLS CPU µs/req | Redis CPU µs/req | Envoy CPU µs/req |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range servers {
		for _, c := range conns {
			med := func(f func(result) (float64, bool)) (float64, bool) {
				v, ok := pick(s, c, f)
				return median(v), ok
			}
			rps, ok := med(func(r result) (float64, bool) { return r.rps(), true })
			if !ok {
				continue
			}
			p50, _ := med(func(r result) (float64, bool) { return float64(r.p50), true })
			p99, _ := med(func(r result) (float64, bool) { return float64(r.p99), true })
			bad, _ := pick(s, c, func(r result) (float64, bool) { return float64(r.bad), true })
			proc := func(p string) string {
				return us(med(func(r result) (float64, bool) { v, ok := r.cpu[p]; return v, ok }))
			}
			total := 0.0
			for _, x := range bad {
				total += x
			}
			fmt.Fprintf(&b, "| %s | %d | %.0f | %s | %s | %.0f | %s | %s | %s |\n", s, c, rps,
				ms(time.Duration(p50)), ms(time.Duration(p99)), total, proc("rls"), proc("redis"), proc("envoy"))
		}
	}

	find := func(round int, server string, c int) (result, bool) {
		for _, r := range results {
			if r.round == round && r.setup == server && r.conns == c {
				return r, true
			}
		}
		return result{}, false
	}
	b.WriteString("\nOurs against the others: medians of the per-round ratios (throughput: higher is better for ours; p99: lower is):\n\n")
	b.WriteString("| ours | connections | ours/limitador throughput | ours/limitador p99 | ours/noop throughput | ours/noop p99 | ours/envoyratelimit throughput | ours/envoyratelimit p99 |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, c := range conns {
		for _, ours := range []string{"ours", "ours-redis"} {
			fmt.Fprintf(&b, "| %s | %d |", ours, c)
			for _, other := range []string{"limitador", "noop", "envoyratelimit"} {
				var tput, p99 []float64
				for _, r := range results {
					if r.setup != ours || r.conns != c {
						continue
					}
					if o, ok := find(r.round, other, c); ok && o.rps() > 0 && o.p99 > 0 {
						tput = append(tput, r.rps()/o.rps())
						p99 = append(p99, float64(r.p99)/float64(o.p99))
					}
				}
				if len(tput) == 0 {
					b.WriteString(" – | – |")
					continue
				}
				fmt.Fprintf(&b, " %.2f | %.2f |", median(tput), median(p99))
			}
			b.WriteString("\n")
		}
	}
	return b.String()
}

// treeCommit says which commit the tree at root is, and whether it has
// changes on top.
func treeCommit(root string) string {
	out, err := exec.Command("git", "-C", root, "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return "commit unknown (not a git checkout)"
	}
	s := "commit " + strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "-C", root, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
		s += " with uncommitted changes"
	}
	return s
}
