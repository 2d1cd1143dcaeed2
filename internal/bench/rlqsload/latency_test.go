//go:build rlqsbench

package rlqsload

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/internal/bench/benchenv"
	"github.com/dynalimit/dynalimit/internal/envoytest"
)

const (
	rlqsBootstrap  = "examples/envoy/envoy-rlqs.yaml"
	plainBootstrap = "examples/envoy/envoy.yaml"
	configDir      = "internal/bench/rlqsload/testdata/config"
)

// kind is one way through Envoy that the latency benchmark times.
type kind struct {
	name   string
	rig    *envoytest.Rig
	header func(i int) []string
}

func TestRLQSLatency(t *testing.T) {
	block := benchenv.Ints(t, "BLOCK", "50")[0]
	rounds := benchenv.Ints(t, "ROUNDS", "400")[0]
	warmup := benchenv.Duration(t, "WARMUP", 7*time.Second)
	bound := benchenv.Duration(t, "MAX_ADDED_P99", 200*time.Microsecond)
	t.Logf("load average at start: %s", benchenv.LoadAvg())

	quota := envoytest.Start(t, envoytest.Options{Bootstrap: rlqsBootstrap, ConfigDir: configDir})
	plain := envoytest.Start(t, envoytest.Options{Bootstrap: plainBootstrap, ConfigDir: configDir})
	c := envoytest.Client(t, "127.0.0.2")
	kinds := []kind{
		{"no rate limiting", quota, func(int) []string { return nil }},
		{"RLQS", quota, func(i int) []string { return []string{"x-tenant", "bench" + strconv.Itoa(i%4)} }},
		{"RLS", plain, func(int) []string { return nil }},
	}

	// Warm-up: Envoy's first report of the buckets and the service's
	// assignments (no_assignment_behavior admits until then), the
	// connections, the service's caches.
	for end := time.Now().Add(warmup); time.Now().Before(end); {
		for _, k := range kinds {
			timeBlock(t, c, k, block)
		}
	}
	samples := make([][][]time.Duration, len(kinds)) // kind → round → latencies
	start := time.Now()
	for round := range rounds {
		for j := range kinds {
			k := (round + j) % len(kinds)
			samples[k] = append(samples[k], timeBlock(t, c, kinds[k], block))
		}
	}
	t.Logf("%d rounds of %d requests of each kind, interleaved, in %v; load average %s",
		rounds, block, time.Since(start).Round(time.Millisecond), benchenv.LoadAvg())

	all := report(t, kinds, samples, 0, rounds, "all rounds")
	for q := range 4 {
		report(t, kinds, samples, q*rounds/4, (q+1)*rounds/4, "quarter "+strconv.Itoa(q+1))
	}
	checkServed(t, quota, plain, rounds*block)

	if added := all[1].p99() - all[0].p99(); added > bound {
		t.Errorf("RLQS's p99 %s is %s over no rate limiting's %s (RLS: %s, %s over): more than the %s allowed",
			ms(all[1].p99()), signed(added), ms(all[0].p99()), ms(all[2].p99()), signed(all[2].p99()-all[0].p99()), ms(bound))
	}
}

// timeBlock sends n requests of k one after another and returns how long
// each took; an answer other than 200 fails t.
func timeBlock(t *testing.T, c *http.Client, k kind, n int) []time.Duration {
	t.Helper()
	ds := make([]time.Duration, n)
	for i := range n {
		start := time.Now()
		resp, err := k.rig.DoErr(c, http.MethodGet, "/", k.header(i)...)
		ds[i] = time.Since(start)
		if err != nil || resp.Status != http.StatusOK {
			t.Fatalf("%s: status %d, %v", k.name, resp.Status, err)
		}
	}
	return ds
}

// report logs the quantiles of each kind over rounds [from, to) and what
// each adds over the first kind, and returns the quantiles.
func report(t *testing.T, kinds []kind, samples [][][]time.Duration, from, to int, what string) []summary {
	t.Helper()
	out := make([]summary, len(kinds))
	for k := range kinds {
		var ds []time.Duration
		for _, r := range samples[k][from:to] {
			ds = append(ds, r...)
		}
		out[k] = summarize(ds)
	}
	t.Logf("%s, %d requests a kind, p50 / p90 / p99 / p99.9:", what, len(samples[0][from:to])*len(samples[0][0]))
	for k, kd := range kinds {
		line := kd.name + ": " + out[k].String()
		if k > 0 {
			line += "; over " + kinds[0].name + ": " + out[k].minus(out[0])
		}
		t.Log("  " + line)
	}
	return out
}

// checkServed fails t unless the RLQS service watched the benchmark's
// buckets and assigned them token buckets, and the RLS service decided
// at least n requests: each kind went the way it is named for.
func checkServed(t *testing.T, quota, plain *envoytest.Rig, n int) {
	t.Helper()
	q := quota.Service.Metrics(t)
	if q["ratelimit_rlqs_buckets"] < 4 || q[`ratelimit_rlqs_assignments_total{kind="token_bucket"}`] < 4 {
		t.Errorf("RLQS: %v buckets watched, %v token buckets assigned; want 4 at least",
			q["ratelimit_rlqs_buckets"], q[`ratelimit_rlqs_assignments_total{kind="token_bucket"}`])
	}
	p := plain.Service.Metrics(t)
	if ok := p[`ratelimit_decisions_total{code="OK",domain="edge"}`]; ok < float64(n) {
		t.Errorf("RLS: %v requests admitted by the service, want %d at least", ok, n)
	}
}
