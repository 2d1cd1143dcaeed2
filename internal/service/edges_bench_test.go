package service

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/dynalimit/dynalimit/internal/memstore"
	"github.com/dynalimit/dynalimit/pkg/descriptors"
)

// serveTCP serves a Service on a loopback port with the embedded store, as
// the binary does, and returns a dialer for separate client connections.
func serveTCP(b *testing.B) func() *grpc.ClientConn {
	b.Helper()
	cfg := mustConfig(b, testConfig)
	svc := New(memstore.New(), func() *descriptors.Config { return cfg })
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	gs := grpc.NewServer(svc.GRPCServerOptions()...)
	svc.RegisterGRPC(gs)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = gs.Serve(lis)
	}()
	var conns []*grpc.ClientConn
	b.Cleanup(func() {
		for _, c := range conns {
			_ = c.Close()
		}
		gs.Stop()
		<-done
	})
	return func() *grpc.ClientConn {
		c, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		conns = append(conns, c)
		return c
	}
}

// hugeRequest is a request of 60,000 descriptors of one key, in wire format.
func hugeRequest() []byte {
	return wireRequest("api", repeat(60000, [][2]string{{"user", "x"}})...)
}

// BenchmarkHugeRequest: one request of 60,000 descriptors over gRPC on
// loopback, answered InvalidArgument (the bound is 256).
func BenchmarkHugeRequest(b *testing.B) {
	conn := serveTCP(b)()
	huge := hugeRequest()
	ctx := context.Background()
	b.SetBytes(int64(len(huge)))
	for b.Loop() {
		if _, err := callRaw(ctx, conn, huge); status.Code(err) != codes.InvalidArgument {
			b.Fatalf("ShouldRateLimit(60,000 descriptors) error = %v, want InvalidArgument", err)
		}
	}
}

// BenchmarkDecisionsBesideHugeRequests: ordinary decisions (two descriptors,
// the embedded store) on their own connection, alone and while four callers
// in another process (as Envoy's would be) send 60,000-descriptor requests
// back to back, each on its own connection. It reports the ordinary
// decisions' p50 and p99, and the huge requests refused per decision.
func BenchmarkDecisionsBesideHugeRequests(b *testing.B) {
	for _, callers := range []int{0, 4} {
		b.Run(strconv.Itoa(callers)+"_huge_callers", func(b *testing.B) {
			benchBesideHuge(b, callers)
		})
	}
}

func benchBesideHuge(b *testing.B, callers int) {
	dial := serveTCP(b)
	conn := dial()
	var refusedBy func() float64
	if callers > 0 {
		refusedBy = startHugeCallers(b, conn.Target(), callers)
	}
	client := pb.NewRateLimitServiceClient(conn)
	req := rlReq("api", desc("user", "alice"), desc("ip", "10.0.0.1"))
	var lat []time.Duration
	for b.Loop() {
		start := time.Now()
		if _, err := client.ShouldRateLimit(context.Background(), req); err != nil {
			b.Fatalf("ShouldRateLimit() error = %v", err)
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))]) / float64(time.Millisecond) }
	b.ReportMetric(q(0.50), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	if refusedBy != nil {
		b.ReportMetric(refusedBy()/float64(len(lat)), "huge-refused/op")
	}
}

// startHugeCallers runs n callers of 60,000-descriptor requests against
// addr in a child process (this test binary, TestHugeCallersHelper) until
// the benchmark ends; the function it returns stops them and says how many
// requests were refused with InvalidArgument.
func startHugeCallers(b *testing.B, addr string, n int) func() float64 {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHugeCallersHelper$")
	cmd.Env = append(os.Environ(), "DYNALIMIT_HUGE_ADDR="+addr, "DYNALIMIT_HUGE_CALLERS="+strconv.Itoa(n))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	var out strings.Builder
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the callers are under way
	b.ResetTimer()
	return func() float64 {
		_ = stdin.Close()
		if err := cmd.Wait(); err != nil {
			b.Fatalf("huge callers: %v\n%s", err, out.String())
		}
		var refused float64
		for _, l := range strings.Split(out.String(), "\n") {
			if v, ok := strings.CutPrefix(l, "refused "); ok {
				refused, _ = strconv.ParseFloat(v, 64)
			}
		}
		return refused
	}
}

// TestHugeCallersHelper is the child process of startHugeCallers.
func TestHugeCallersHelper(t *testing.T) {
	addr := os.Getenv("DYNALIMIT_HUGE_ADDR")
	if addr == "" {
		t.Skip("helper process for BenchmarkDecisionsBesideHugeRequests")
	}
	n, _ := strconv.Atoi(os.Getenv("DYNALIMIT_HUGE_CALLERS"))
	huge := hugeRequest()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	var refused atomic.Int64
	var wg sync.WaitGroup
	for range n {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		wg.Go(func() {
			for ctx.Err() == nil {
				if _, err := callRaw(ctx, conn, huge); status.Code(err) == codes.InvalidArgument {
					refused.Add(1)
				}
			}
		})
	}
	wg.Wait()
	fmt.Printf("refused %d\n", refused.Load())
}
