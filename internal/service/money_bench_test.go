package service

import (
	"context"
	"strconv"
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/dynalimit/dynalimit/internal/memstore"
	"github.com/dynalimit/dynalimit/pkg/descriptors"
)

// BenchmarkMoneyBudget decides a stream-end report of 1,000 input and 400
// output tokens on the embedded store, 1,024 tenants in turn: priced into
// a monthly dollar budget in New York, beside the same report as a plain
// token limit (hits_addend 1,400 per minute). BENCHMARKS.md records the
// ratio.
func BenchmarkMoneyBudget(b *testing.B) {
	const money = `
domain: llm
prices:
  models:
    gpt-4o: {input: 3, output: 15}
descriptors:
  - key: tenant
    descriptors:
      - key: model
        budget: {usd: 1000000, per: month, zone: America/New_York}
`
	const tokens = `
domain: llm
descriptors:
  - key: tenant
    descriptors:
      - key: model
        rate_limit: {unit: minute, requests_per_unit: 1000000000000}
`
	tenants := make([]*pb.RateLimitRequest, 1024)
	plain := make([]*pb.RateLimitRequest, 1024)
	for i := range tenants {
		tenant := "t" + strconv.Itoa(i)
		tenants[i] = rlReq("llm", withHits(desc("tenant", tenant, "model", "gpt-4o", "llm_input_token", "1000", "llm_output_token", "400"), 0))
		plain[i] = rlReq("llm", withHits(desc("tenant", tenant, "model", "gpt-4o"), 1400))
	}
	for _, c := range []struct {
		name string
		cfg  string
		reqs []*pb.RateLimitRequest
	}{{"token_limit", tokens, plain}, {"money_budget", money, tenants}} {
		b.Run(c.name, func(b *testing.B) {
			cfg := mustConfig(b, c.cfg)
			svc := New(memstore.New(), func() *descriptors.Config { return cfg })
			ctx := context.Background()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				resp, err := svc.ShouldRateLimit(ctx, c.reqs[i%len(c.reqs)])
				if err != nil || resp.GetOverallCode() != pb.RateLimitResponse_OK {
					b.Fatalf("ShouldRateLimit() = %v, %v", resp, err)
				}
				i++
			}
		})
	}
}
