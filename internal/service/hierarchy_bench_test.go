package service

import (
	"context"
	"strconv"
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/dynalimit/dynalimit/internal/memstore"
	"github.com/dynalimit/dynalimit/pkg/descriptors"
)

// hierarchyBenchConfig has a flat rule and a three-level chain with limits
// at every level, all large enough to admit every decision.
const hierarchyBenchConfig = `
domain: bench
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000000000}
  - key: tenant
    entity: true
    rate_limit: {unit: second, requests_per_unit: 1000000000}
    descriptors:
      - key: project
        entity: true
        rate_limit: {unit: second, requests_per_unit: 1000000000}
        descriptors:
          - key: api_key
            entity: true
            cascade: true
            rate_limit: {unit: second, requests_per_unit: 1000000000}
`

// BenchmarkHierarchy decides through the service on the embedded store: a
// flat descriptor, and a three-level chain (1,000 API keys under 10
// projects under one tenant), one goroutine per core.
func BenchmarkHierarchy(b *testing.B) {
	cfg := mustConfig(b, hierarchyBenchConfig)
	flat := make([]*pb.RateLimitRequest, 1000)
	chain := make([]*pb.RateLimitRequest, 1000)
	for i := range chain {
		flat[i] = rlReq("bench", desc("user", "u"+strconv.Itoa(i)))
		chain[i] = rlReq("bench", desc("tenant", "acme", "project", "p"+strconv.Itoa(i%10), "api_key", "k"+strconv.Itoa(i)))
	}
	for _, c := range []struct {
		name string
		reqs []*pb.RateLimitRequest
	}{{"flat", flat}, {"three_levels", chain}} {
		b.Run(c.name, func(b *testing.B) {
			st := memstore.New()
			svc := New(st, func() *descriptors.Config { return cfg })
			ctx := context.Background()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					if _, err := svc.ShouldRateLimit(ctx, c.reqs[i%len(c.reqs)]); err != nil {
						b.Errorf("ShouldRateLimit() error = %v", err)
						return
					}
					i += 7
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
		})
	}
}
