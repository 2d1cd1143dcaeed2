//go:build redisbench

package redisclient

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var (
	srvOnce sync.Once
	srv     *server
	srvErr  error
)

// sharedServer starts the run's redis-server once; TestMain stops it.
func sharedServer(tb testing.TB) *server {
	tb.Helper()
	srvOnce.Do(func() { srv, srvErr = startServer() })
	if srvErr != nil {
		tb.Fatal(srvErr)
	}
	return srv
}

func TestMain(m *testing.M) {
	code := m.Run()
	if srv != nil {
		srv.stop()
	}
	os.Exit(code)
}

// tenants are the decisions of the 10,000-key runs; tenant 0 is the hot one.
var tenants = sync.OnceValue(func() []call {
	calls := make([]call, 10_000)
	for i := range calls {
		calls[i] = newCall(i)
	}
	return calls
})

// TestScriptAgrees: through every client, the script admits a burst of 10
// on a limit of 10 a minute, refuses the 11th, and answers alike.
func TestScriptAgrees(t *testing.T) {
	s := sharedServer(t)
	for i, name := range clientNames {
		cl, err := openClient(name, s.addr)
		if err != nil {
			t.Fatal(err)
		}
		c := newCall(100_000 + i)
		for l := range levels {
			c.args[l*argsPerLevel+0], c.args[l*argsPerLevel+1], c.args[l*argsPerLevel+2] = "10000", "60000", "10000"
			c.anys[l*argsPerLevel+0], c.anys[l*argsPerLevel+1], c.anys[l*argsPerLevel+2] = "10000", "60000", "10000"
		}
		admitted := 0
		for range 11 {
			out, err := cl.decide(context.Background(), &c)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if len(out) != 5*levels {
				t.Fatalf("%s: %d integers, want %d", name, len(out), 5*levels)
			}
			admitted += int(out[0])
		}
		cl.close()
		if admitted != 10 {
			t.Errorf("%s: admitted %d of 11 on a burst of 10", name, admitted)
		}
	}
}

// env returns the environment variable k, or def.
func env(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// TestRedisClients measures every client on every cell, ROUNDS times, the
// clients' order rotated each round, and prints each cell and the medians.
func TestRedisClients(t *testing.T) {
	s := sharedServer(t)
	rounds, _ := strconv.Atoi(env("ROUNDS", "3"))
	d, err := time.ParseDuration(env("DURATION", "2s"))
	if err != nil {
		t.Fatal(err)
	}
	var concs []int
	for _, f := range strings.Split(env("CONC", "1,16,64,256"), ",") {
		n, err := strconv.Atoi(f)
		if err != nil {
			t.Fatal(err)
		}
		concs = append(concs, n)
	}
	keySets := strings.Split(env("KEYS", "hot,10000"), ",")
	names := strings.Split(env("CLIENTS", strings.Join(clientNames, ",")), ",")
	version, _ := s.do("INFO", "server")
	for _, l := range strings.Split(version, "\r\n") {
		if strings.HasPrefix(l, "redis_version:") {
			t.Logf("%s, GOMAXPROCS %d, %d rounds of %s a cell, load average %s", l, runtime.GOMAXPROCS(0), rounds, d, loadavg())
		}
	}
	clients := map[string]client{}
	for _, name := range names {
		cl, err := openClient(name, s.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.close()
		clients[name] = cl
	}
	calls := tenants()
	// A burst of 64 callers first: each client then runs as it would in a
	// replica that has served concurrent calls (rueidis leaves its
	// synchronous mode for its pipelining writer and reader goroutines at
	// the first concurrent call, and stays there; the pools fill).
	for _, name := range names {
		if _, _, err := drive(clients[name], calls, false, 64, 200*time.Millisecond); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	var cells []cell
	for r := range rounds {
		t.Logf("round %d: load average %s", r+1, loadavg())
		for _, keys := range keySets {
			for _, conc := range concs {
				for i := range names {
					name := names[(i+r)%len(names)]
					c, err := measure(s, clients[name], calls, cell{client: name, keys: keys, conc: conc, round: r}, d)
					if err != nil {
						t.Fatalf("%s %s c=%d: %v", name, keys, conc, err)
					}
					t.Log(c.line())
					cells = append(cells, c)
				}
			}
		}
	}
	t.Logf("load average at the end %s", loadavg())
	t.Log("medians over the rounds\n" + summary(cells, names, keySets, concs))
}

func (c *cell) line() string {
	return fmt.Sprintf("r%d %-12s keys=%-5s c=%-3d %8.0f ops/s p50 %v p99 %v cpu %v/op allocs %.1f/op | evalsha %.3f/op eval %.4f/op in %.0f B/op %.1f calls/read server cpu %v/op inst %.0f ops/s",
		c.round+1, c.client, c.keys, c.conc, c.opsPerSec(), c.p50, c.p99, c.cpuPerOp, c.allocsPerOp,
		c.evalshaPerOp, c.evalPerOp, c.bytesInPerOp, c.callsPerRead, c.serverCPUOp, c.instOpsPerSec)
}

// BenchmarkEvalsha gives ns/op and allocs/op of one decision through each
// client with b.RunParallel: c/GOMAXPROCS goroutines per P (SetParallelism),
// at least one per P, so c=1 runs GOMAXPROCS goroutines.
func BenchmarkEvalsha(b *testing.B) {
	s := sharedServer(b)
	calls := tenants()
	for _, name := range clientNames {
		cl, err := openClient(name, s.addr)
		if err != nil {
			b.Fatal(err)
		}
		for _, keys := range []string{"hot", "10000"} {
			for _, conc := range []int{1, 16, 64, 256} {
				b.Run(fmt.Sprintf("%s/keys=%s/c=%d", name, keys, conc), func(b *testing.B) {
					benchParallel(b, cl, calls, keys == "hot", conc)
				})
			}
		}
		cl.close()
	}
}

func benchParallel(b *testing.B, cl client, calls []call, hot bool, conc int) {
	b.ReportAllocs()
	b.SetParallelism(max(1, conc/runtime.GOMAXPROCS(0)))
	var seq atomic.Uint64
	b.RunParallel(func(pb *testing.PB) {
		rng := rand.New(rand.NewPCG(seq.Add(1), 7))
		for pb.Next() {
			c := &calls[0]
			if !hot {
				c = &calls[rng.IntN(len(calls))]
			}
			if _, err := cl.decide(context.Background(), c); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
