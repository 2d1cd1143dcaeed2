//go:build rlqsbench

package rlqsload

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/dynalimit/dynalimit/internal/bench/benchenv"
	"github.com/dynalimit/dynalimit/internal/envoytest"
	"github.com/dynalimit/dynalimit/internal/testutil"
)

func TestRLQSMemory(t *testing.T) {
	streams := benchenv.Ints(t, "STREAMS", "1000")[0]
	buckets := benchenv.Ints(t, "BUCKETS", "1000")[0]
	conns := benchenv.Ints(t, "CONNS", "4")[0]
	hold := benchenv.Duration(t, "HOLD", 30*time.Second)
	bound := benchenv.Ints(t, "RSS_BOUND_MIB", "6144")[0]

	// Buckets are abandoned after RLQS_ABANDON_AFTER without demand: the
	// run holds them longer than the default minute may allow.
	srv := envoytest.StartService(t, filepath.Join(testutil.RepoRoot(t), configDir), "RLQS_ABANDON_AFTER=10m", "DEBUG_PPROF=true")
	pid := srv.Pid()
	start := procStatus(t, pid)
	t.Logf("the binary at start: VmRSS %d MiB", start["VmRSS"]>>10)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clients := make([]rlqspb.RateLimitQuotaServiceClient, conns)
	for i := range clients {
		cc, err := grpc.NewClient("127.0.0.1:"+strconv.Itoa(srv.GRPCPort), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cc.Close() })
		clients[i] = rlqspb.NewRateLimitQuotaServiceClient(cc)
	}
	began := time.Now()
	held := openStreams(ctx, t, clients, streams, buckets)
	t.Logf("%d streams over %d connections, %d buckets each, all assigned in %v",
		len(held), conns, buckets, time.Since(began).Round(time.Millisecond))

	m := srv.Metrics(t)
	if m["ratelimit_rlqs_streams"] != float64(streams) || m["ratelimit_rlqs_buckets"] != float64(streams*buckets) {
		t.Fatalf("the service counts %v streams and %v buckets, want %d and %d",
			m["ratelimit_rlqs_streams"], m["ratelimit_rlqs_buckets"], streams, streams*buckets)
	}
	// Held over the store's report slots (5 s each), which write every
	// pooled bucket.
	var rss int64
	for end := time.Now().Add(hold); ; {
		s, m := procStatus(t, pid), srv.Metrics(t)
		rss = max(rss, s["VmRSS"])
		t.Logf("  %5.1f s after the first stream opened: VmRSS %d MiB, VmHWM %d MiB; Go heap %d MiB in use, next GC at %d MiB (GOGC %.0f), %.0f GCs; the store's items %d MiB",
			time.Since(began).Seconds(), s["VmRSS"]>>10, s["VmHWM"]>>10, mib(m["go_memstats_heap_inuse_bytes"]),
			mib(m["go_memstats_next_gc_bytes"]), m["go_gc_gogc_percent"], m["go_gc_duration_seconds_count"], mib(m["ratelimit_store_memory_bytes"]))
		if time.Now().After(end) {
			break
		}
		time.Sleep(2 * time.Second)
	}
	peak := procStatus(t, pid)["VmHWM"]
	per := float64((rss-start["VmRSS"])<<10) / float64(streams*buckets)
	t.Logf("%d streams × %d buckets: VmRSS at most %d MiB (%.0f bytes a bucket over the start), peak (VmHWM) %d MiB; bound %d MiB",
		streams, buckets, rss>>10, per, peak>>10, bound)
	if peak>>10 > int64(bound) {
		t.Errorf("the binary's peak resident set is %d MiB, over the bound of %d MiB", peak>>10, bound)
	}
	if m := srv.Metrics(t); m["ratelimit_rlqs_streams"] != float64(streams) {
		t.Errorf("%v streams open at the end, want %d", m["ratelimit_rlqs_streams"], streams)
	}
	heapProfile(t, srv.DebugAddr())
	runtime.KeepAlive(held)
}

// mib returns bytes in MiB.
func mib(bytes float64) int64 { return int64(bytes) >> 20 }

// heapProfile writes the binary's heap profile to HEAP_PROFILE, when set
// (go tool pprof reads it).
func heapProfile(t *testing.T, debugAddr string) {
	t.Helper()
	path := os.Getenv("HEAP_PROFILE")
	if path == "" {
		return
	}
	resp, err := http.Get("http://" + debugAddr + "/debug/pprof/heap")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("heap profile: %d, %v", resp.StatusCode, err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("the binary's heap profile: %s", path)
}

// openStreams opens n streams over clients (in turn), reports buckets
// distinct buckets on each, {tenant: s<stream>-b<bucket>}, and waits on
// each until every bucket has its action. The streams stay open until ctx
// ends.
func openStreams(ctx context.Context, t *testing.T, clients []rlqspb.RateLimitQuotaServiceClient, n, buckets int) []rlqspb.RateLimitQuotaService_StreamRateLimitQuotasClient {
	t.Helper()
	held := make([]rlqspb.RateLimitQuotaService_StreamRateLimitQuotasClient, n)
	next := make(chan int)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for s := range next {
				st, err := openStream(ctx, clients[s%len(clients)], s, buckets)
				if err != nil {
					errs <- fmt.Errorf("stream %d: %w", s, err)
					continue
				}
				held[s] = st
			}
		})
	}
	for s := range n {
		next <- s
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return held
}

// openStream opens stream s, reports its buckets and reads the answers
// until each bucket has an action.
func openStream(ctx context.Context, c rlqspb.RateLimitQuotaServiceClient, s, buckets int) (rlqspb.RateLimitQuotaService_StreamRateLimitQuotasClient, error) {
	st, err := c.StreamRateLimitQuotas(ctx)
	if err != nil {
		return nil, err
	}
	msg := &rlqspb.RateLimitQuotaUsageReports{Domain: "quota"}
	prefix := "s" + strconv.Itoa(s) + "-b"
	for b := range buckets {
		msg.BucketQuotaUsages = append(msg.BucketQuotaUsages, &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId:           &rlqspb.BucketId{Bucket: map[string]string{"tenant": prefix + strconv.Itoa(b)}},
			TimeElapsed:        durationpb.New(0),
			NumRequestsAllowed: 1,
		})
	}
	if err := st.Send(msg); err != nil {
		return nil, err
	}
	seen := make(map[string]bool, buckets)
	for len(seen) < buckets {
		resp, err := st.Recv()
		if err != nil {
			return nil, err
		}
		for _, a := range resp.GetBucketAction() {
			seen[a.GetBucketId().GetBucket()["tenant"]] = true
		}
	}
	return st, nil
}

// procStatus returns the kB figures of /proc/pid/status (VmRSS, VmHWM, …).
func procStatus(t *testing.T, pid int) map[string]int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if f := strings.Fields(v); ok && len(f) == 2 && f[1] == "kB" {
			out[k], _ = strconv.ParseInt(f[0], 10, 64)
		}
	}
	return out
}
