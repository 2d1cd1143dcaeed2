package service

import (
	"context"
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/dynalimit/dynalimit/internal/grpcserver"
	"github.com/dynalimit/dynalimit/internal/grpcserver/wiretest"
	"github.com/dynalimit/dynalimit/internal/israce"
	"github.com/dynalimit/dynalimit/internal/memstore"
	"github.com/dynalimit/dynalimit/internal/metrics"
	"github.com/dynalimit/dynalimit/pkg/descriptors"
)

// TestAllocationCeilings holds the allocations of one decision through the
// service on the embedded store to their measured counts (a one-descriptor
// request: its item and entries in one allocation, its response in one): a change that
// adds an allocation to the hot path fails here, and one that removes some
// lowers the ceiling. The counts are those of BenchmarkShouldRateLimit and
// BenchmarkHierarchy (`go test ./internal/service -run '^$' -bench . -benchmem`).
func TestAllocationCeilings(t *testing.T) {
	if israce.Enabled {
		t.Skip("allocation counts differ under -race (sync.Pool drops items); make test runs this without it")
	}
	cfg := mustConfig(t, testConfig)
	chain := mustConfig(t, hierarchyBenchConfig)
	cases := []struct {
		name    string
		cfg     *descriptors.Config
		req     *pb.RateLimitRequest
		opts    []Option
		ceiling float64
	}{
		{"one descriptor", cfg, rlReq("api", desc("user", "alice")), nil, 6},
		{"two descriptors", cfg, rlReq("api", desc("user", "alice"), desc("ip", "10.0.0.1")), nil, 10},
		{"headers and metadata", cfg, rlReq("api", desc("user", "alice"), desc("ip", "10.0.0.1")),
			[]Option{WithResponseHeaders(true, "", "", ""), WithDynamicMetadata(true)}, 46},
		{"unmatched", cfg, rlReq("api", desc("nothing", "x")), nil, 3},
		{"three-level chain", chain, rlReq("bench", desc("tenant", "acme", "project", "p1", "api_key", "k1")), nil, 6},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			svc := New(memstore.New(), func() *descriptors.Config { return c.cfg }, c.opts...)
			ctx := context.Background()
			if _, err := svc.ShouldRateLimit(ctx, c.req); err != nil {
				t.Fatal(err)
			}
			got := testing.AllocsPerRun(200, func() {
				if _, err := svc.ShouldRateLimit(ctx, c.req); err != nil {
					t.Fatal(err)
				}
			})
			t.Logf("%s: %.0f allocations a decision", c.name, got)
			if got > c.ceiling {
				t.Errorf("%s: %.0f allocations a decision, ceiling %.0f: a change added one to the hot path", c.name, got, c.ceiling)
			}
		})
	}
}

// TestAllocationCeilingsOnTheWire holds the allocations of one decision
// as Envoy asks for it: a request's bytes through the gRPC transport
// (internal/grpcserver, calls answered on the connection's reader), decoded
// and decided by the service on the embedded store, and the answer encoded
// into the connection's buffer. The counts are BenchmarkOnTheWire's.
func TestAllocationCeilingsOnTheWire(t *testing.T) {
	if israce.Enabled {
		t.Skip("allocation counts differ under -race (sync.Pool drops items); make test runs this without it")
	}
	cfg := mustConfig(t, testConfig)
	// The binary wraps every call in the compatible stats' interceptor
	// (unless DISABLE_STATS).
	compat, err := metrics.NewCompat(prometheus.NewRegistry(), metrics.CompatOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name        string
		req         *pb.RateLimitRequest
		interceptor grpc.UnaryServerInterceptor
		ceiling     float64
	}{
		{"one descriptor", rlReq("api", desc("user", "alice")), nil, 14},
		{"two descriptors", rlReq("api", desc("user", "alice"), desc("ip", "10.0.0.1")), nil, 24},
		{"one descriptor, the compatible stats", rlReq("api", desc("user", "alice")), compat.UnaryInterceptor(), 14},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cl := wireClient(t, New(memstore.New(), func() *descriptors.Config { return cfg }), c.interceptor)
			req, err := proto.Marshal(c.req)
			if err != nil {
				t.Fatal(err)
			}
			call := func() {
				if _, st, err := cl.Call(shouldRateLimit, req); err != nil || st != "0" {
					t.Fatalf("grpc-status %q, %v", st, err)
				}
			}
			for range 10 {
				call()
			}
			got := testing.AllocsPerRun(300, call)
			t.Logf("%s: %.0f allocations a decision on the wire", c.name, got)
			if got > c.ceiling {
				t.Errorf("%s: %.0f allocations a decision on the wire, ceiling %.0f: a change added one to the hot path", c.name, got, c.ceiling)
			}
		})
	}
}

// BenchmarkOnTheWire is one decision as Envoy asks for it, one at a time:
// transport, decoding, the service on the embedded store, encoding.
func BenchmarkOnTheWire(b *testing.B) {
	cfg := mustConfig(b, testConfig)
	cl := wireClient(b, New(memstore.New(), func() *descriptors.Config { return cfg }), nil)
	req, err := proto.Marshal(rlReq("api", desc("user", "alice")))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, st, err := cl.Call(shouldRateLimit, req); err != nil || st != "0" {
			b.Fatalf("grpc-status %q, %v", st, err)
		}
	}
}

const shouldRateLimit = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

// wireClient serves svc on the native transport, as the binary does on the
// embedded store, with a grpc-timeout as Envoy sends one (longer than
// Envoy's usual 20 ms: a busy machine may stall a call that long, and the
// service would rightly answer DeadlineExceeded).
func wireClient(tb testing.TB, svc *Service, interceptor grpc.UnaryServerInterceptor) *wiretest.Client {
	srv := grpcserver.New(grpcserver.Options{Codec: svc.Codec(), Inline: true, UnaryInterceptor: interceptor})
	svc.RegisterGRPC(srv)
	return wiretest.Dial(tb, srv).WithTimeout("5S")
}
