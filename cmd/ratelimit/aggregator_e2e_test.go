package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/dynalimit/dynalimit/internal/testutil"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	dadmin "github.com/dynalimit/dynalimit/pkg/dynamo/admin"
	"github.com/dynalimit/dynalimit/pkg/dynamo/usage"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// usageConfig has a plain bucket, one to be sharded, and a three-level
// chain, each far from its limit.
const usageConfig = `domain: usage
descriptors:
  - key: generic_key
    value: plain
    rate_limit: {unit: hour, requests_per_unit: 1000000}
  - key: generic_key
    value: sharded
    rate_limit: {unit: hour, requests_per_unit: 1000000}
  - key: tenant
    entity: true
    rate_limit: {unit: hour, requests_per_unit: 1000000}
    descriptors:
      - key: project
        entity: true
        cascade: true
        rate_limit: {unit: hour, requests_per_unit: 1000000}
        descriptors:
          - key: api_key
            entity: true
            cascade: true
            rate_limit: {unit: hour, requests_per_unit: 1000000}
`

// usageLoad is one kind of request of TestAggregatorExactUsage: n
// admitted decisions of cost each, on descriptor d, charging the entities
// named.
type usageLoad struct {
	n, cost  int
	d        *rlv3.RateLimitDescriptor
	entities []string
}

// TestAggregatorExactUsage: 1,000 admitted decisions of known cost over a
// plain bucket, a bucket of 4 shards and a three-level chain, made over
// gRPC against the binary on DynamoDB Local; `ratelimit aggregator` reads
// the table's real stream. It is killed halfway and started again, and
// then a second one runs beside it. The hourly, daily and monthly usage
// snapshots hold exactly the decisions' totals, per entity and level.
func TestAggregatorExactUsage(t *testing.T) {
	env := dynamoEnv(t, "BACKEND_TIMEOUT=2s", "ON_UNAVAILABLE=block")
	st := openStore(t, env)
	shape, err := tokenbucket.Rate(1000000, time.Hour, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := dadmin.New(st).SetShards(context.Background(), cascade.Key{Entity: "generic_key=sharded", Resource: "usage"}, 4, map[string]tokenbucket.Limit{"default": shape}); err != nil {
		t.Fatalf("SetShards: %v", err)
	}
	dir := t.TempDir()
	writeConfig(t, dir, "usage.yaml", usageConfig)
	client := rlsClient(t, startBinary(t, dir, env...))
	chain := &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: "acme"}, {Key: "project", Value: "web"}, {Key: "api_key", Value: "k1"}}}
	loads := []usageLoad{
		{n: 400, cost: 1, d: descriptor("generic_key", "plain"), entities: []string{"generic_key=plain"}},
		{n: 300, cost: 2, d: descriptor("generic_key", "sharded"), entities: []string{"generic_key=sharded"}},
		{n: 300, cost: 3, d: chain, entities: []string{"k1", "web", "acme"}},
	}
	want := map[string]int64{}
	for _, l := range loads {
		for _, e := range l.entities {
			want[e] += int64(l.n * l.cost * 1000)
		}
	}
	decide := func(half int) {
		for _, l := range loads {
			for range l.n / 2 {
				resp, err := client.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "usage", HitsAddend: uint32(l.cost), Descriptors: []*rlv3.RateLimitDescriptor{l.d}})
				if err != nil || resp.GetOverallCode() != pb.RateLimitResponse_OK {
					t.Fatalf("half %d: decision = %v, %v; want OK", half, resp.GetOverallCode(), err)
				}
			}
		}
	}

	decide(1)
	first := startAggregator(t, env)
	// Killed while it reads: whatever it applied and did not checkpoint
	// is read again, and counted once.
	time.Sleep(1500 * time.Millisecond)
	if err := first.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-first.Exited()
	decide(2)
	startAggregator(t, env)
	startAggregator(t, env) // two at once: one reads, one waits

	got := func(w usage.Window) map[string]int64 {
		out := map[string]int64{}
		for e := range want {
			snaps, err := usage.Of(st).Usage(context.Background(), "", e, "usage", w, time.Unix(0, 0))
			if err != nil {
				t.Fatalf("Usage(%s, %s): %v", e, w, err)
			}
			for _, s := range snaps {
				for _, v := range s.Limits {
					out[e] += v
				}
			}
		}
		return out
	}
	same := func(a, b map[string]int64) bool { return fmt.Sprint(a) == fmt.Sprint(b) }
	start := time.Now()
	if !testutil.Eventually(60*time.Second, func() bool { return same(got(usage.Hourly), want) }) {
		t.Fatalf("hourly usage %v, want %v", got(usage.Hourly), want)
	}
	t.Logf("usage exact %v after the second half's decisions; the killed poller had logged:\n%s", time.Since(start).Round(time.Millisecond), lastLines(first.Output(), 5))
	time.Sleep(2 * time.Second) // anything counted twice would show by now
	for _, w := range []usage.Window{usage.Hourly, usage.Daily, usage.Monthly} {
		if g := got(w); !same(g, want) {
			t.Errorf("%s usage %v, want %v", w, g, want)
		}
	}

	// Under load: 30 callers on the plain bucket for 3 s while the poller
	// reads; how long after the last decision the usage is exact again.
	var admitted atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(3 * time.Second)
	for range 30 {
		wg.Go(func() {
			for time.Now().Before(stop) {
				resp, err := client.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "usage", Descriptors: []*rlv3.RateLimitDescriptor{loads[0].d}})
				if err == nil && resp.GetOverallCode() == pb.RateLimitResponse_OK {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	last := time.Now()
	want["generic_key=plain"] += admitted.Load() * 1000
	if !testutil.Eventually(30*time.Second, func() bool { return same(got(usage.Hourly), want) }) {
		t.Fatalf("after the load: hourly usage %v, want %v", got(usage.Hourly), want)
	}
	t.Logf("load: %d decisions in 3 s (%.0f/s); usage exact %v after the last one", admitted.Load(), float64(admitted.Load())/3, time.Since(last).Round(time.Millisecond))
}

// rlsClient dials p's gRPC port (closed when t ends).
func rlsClient(t *testing.T, p *proc) pb.RateLimitServiceClient {
	t.Helper()
	cc, err := grpc.NewClient(p.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return pb.NewRateLimitServiceClient(cc)
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// openStore opens the table env names, as the admin commands do.
func openStore(t *testing.T, env []string) *dynamo.Store {
	t.Helper()
	get := func(k string) string {
		v := ""
		for _, kv := range env {
			if rest, ok := strings.CutPrefix(kv, k+"="); ok {
				v = rest
			}
		}
		return v
	}
	client, err := dynamo.NewClient(context.Background(), get("DYNAMODB_ENDPOINT"), get("AWS_REGION"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := dynamo.NewStore(context.Background(), client, dynamo.Config{Table: get("DYNAMODB_TABLE"), Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// startAggregator runs `ratelimit aggregator` with env, ready when its
// debug listener answers.
func startAggregator(t *testing.T, env []string) *testutil.Process {
	t.Helper()
	port := testutil.FreePort(t)
	cmd := exec.Command(testutil.Binary(t), "aggregator")
	cmd.Env = append(append(os.Environ(), env...), "DEBUG_HOST=127.0.0.1", fmt.Sprintf("DEBUG_PORT=%d", port), "LOG_LEVEL=info")
	return testutil.StartProcess(t, "ratelimit aggregator", cmd, testutil.Answers200(fmt.Sprintf("http://127.0.0.1:%d/livez", port)))
}
