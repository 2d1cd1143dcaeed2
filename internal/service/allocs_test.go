package service

import (
	"context"
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/dynalimit/dynalimit/internal/memstore"
	"github.com/dynalimit/dynalimit/pkg/descriptors"
)

// TestAllocationCeilings holds the allocations of one decision through the
// service on the embedded store to their measured counts (a one-descriptor
// request: its item and entries in one allocation, its response in one): a change that
// adds an allocation to the hot path fails here, and one that removes some
// lowers the ceiling. The counts are those of BenchmarkShouldRateLimit and
// BenchmarkHierarchy (`go test ./internal/service -run '^$' -bench . -benchmem`).
func TestAllocationCeilings(t *testing.T) {
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
