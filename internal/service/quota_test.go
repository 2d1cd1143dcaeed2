package service_test

import (
	"context"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/dynalimit/dynalimit/internal/memstore"
	"github.com/dynalimit/dynalimit/internal/service"
	"github.com/dynalimit/dynalimit/pkg/descriptors"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

const quotaYAML = `
domain: llm
descriptors:
  - key: tenant
    entity: true
    rate_limit: {unit: minute, requests_per_unit: 50}
    descriptors:
      - key: api_key
        entity: true
        cascade: true
        rate_limit: {unit: minute, requests_per_unit: 30}
  - key: api
    limits:
      - {name: rps, unit: second, requests_per_unit: 10}
      - {name: rpm, unit: minute, requests_per_unit: 100}
`

func quotaService(t *testing.T) *service.Service {
	t.Helper()
	cfg, err := descriptors.Parse([]descriptors.File{{Name: "q.yaml", Data: []byte(quotaYAML)}}, descriptors.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return service.New(memstore.New(), func() *descriptors.Config { return cfg })
}

// TestChargeQuotaEveryLevel: a report charges every level of a
// hierarchy, and its demand to the meter, in one plan; the charge lands
// even past zero.
func TestChargeQuotaEveryLevel(t *testing.T) {
	svc := quotaService(t)
	ctx := context.Background()
	entries := []descriptors.Entry{{Key: "tenant", Value: "acme"}, {Key: "api_key", Value: "k1"}}
	q, err := svc.ChargeQuota(ctx, "llm", entries, service.QuotaCharge{Allowed: 40, Demand: [3]int64{0, 45_000, 0}})
	if err != nil {
		t.Fatal(err)
	}
	if !q.Matched || q.Unlimited || len(q.Limits) != 2 || !q.Metered {
		t.Fatalf("quota %+v", q)
	}
	if q.Limits[0].Depth != 0 || q.Limits[1].Depth != 1 {
		t.Errorf("depths %d %d", q.Limits[0].Depth, q.Limits[1].Depth)
	}
	if got := q.Limits[0].Remaining; got != -10*tokenbucket.PerToken {
		t.Errorf("api key: %d left, want 10 tokens of debt", got)
	}
	if got := q.Limits[1].Remaining; got != 10*tokenbucket.PerToken {
		t.Errorf("tenant: %d left, want 10", got)
	}
	if got := tokenbucket.MaxMillitokens - q.Demand[1]; got != 45*tokenbucket.PerToken {
		t.Errorf("meter 1 fell by %d, want 45 tokens", got)
	}
	if q.Demand[0] != tokenbucket.MaxMillitokens || q.Demand[2] != tokenbucket.MaxMillitokens {
		t.Errorf("the other meters %d %d, want full", q.Demand[0], q.Demand[2])
	}
	// A second key of the tenant charges the same tenant bucket.
	q, err = svc.ChargeQuota(ctx, "llm", []descriptors.Entry{{Key: "tenant", Value: "acme"}, {Key: "api_key", Value: "k2"}}, service.QuotaCharge{Allowed: 5})
	if err != nil {
		t.Fatal(err)
	}
	if got := q.Limits[1].Remaining; got != 5*tokenbucket.PerToken {
		t.Errorf("tenant after the second key: %d, want 5", got)
	}
	// The meters are k1's item's: move 5 tokens from meter 1 to meter 0,
	// then reset meter 1.
	q, err = svc.ChargeQuota(ctx, "llm", entries, service.QuotaCharge{Demand: [3]int64{5_000, -5_000, 0}})
	if err != nil {
		t.Fatal(err)
	}
	if got := tokenbucket.MaxMillitokens - q.Demand[0]; got != 5*tokenbucket.PerToken {
		t.Errorf("meter 0 fell by %d, want 5 tokens", got)
	}
	if got := tokenbucket.MaxMillitokens - q.Demand[1]; got != 40*tokenbucket.PerToken {
		t.Errorf("meter 1 refunded 5 tokens: below full by %d, want 40 tokens", got)
	}
	q, err = svc.ChargeQuota(ctx, "llm", entries, service.QuotaCharge{Demand: [3]int64{0, service.MeterReset, 0}})
	if err != nil {
		t.Fatal(err)
	}
	if q.Demand[1] != tokenbucket.MaxMillitokens {
		t.Errorf("meter 1 after a reset: %d, want full", q.Demand[1])
	}
}

// TestChargeQuotaSharesTheLimitWithRLS: what RLQS reports and what
// ShouldRateLimit admits draw on one bucket.
func TestChargeQuotaSharesTheLimitWithRLS(t *testing.T) {
	svc := quotaService(t)
	ctx := context.Background()
	q, err := svc.ChargeQuota(ctx, "llm", []descriptors.Entry{{Key: "api", Value: "x"}}, service.QuotaCharge{Allowed: 8})
	if err != nil {
		t.Fatal(err)
	}
	if len(q.Limits) != 2 {
		t.Fatalf("%d limits, want both of the rule", len(q.Limits))
	}
	req := &pb.RateLimitRequest{Domain: "llm", Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "api", Value: "x"}}}}}
	admitted := 0
	for range 10 {
		resp, err := svc.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetOverallCode() == pb.RateLimitResponse_OK {
			admitted++
		}
	}
	if admitted > 3 { // 2 left, and at most one refilled meanwhile
		t.Errorf("RLS admitted %d after RLQS used 8 of 10", admitted)
	}
}

// TestChargeQuotaUnlimitedAndUnknown: nothing to charge.
func TestChargeQuotaUnlimitedAndUnknown(t *testing.T) {
	svc := quotaService(t)
	q, err := svc.ChargeQuota(context.Background(), "llm", []descriptors.Entry{{Key: "nothing", Value: "x"}}, service.QuotaCharge{Allowed: 1})
	if err != nil || q.Matched || !q.Unlimited {
		t.Errorf("%+v %v", q, err)
	}
	full := service.DemandMeter.Capacity
	if r := service.DemandRate(full-20_000, full-25_000, time.Minute); r != 6.0/60 {
		t.Errorf("rate %v, want 6 a minute (5 net of the meter's refill of 1)", r)
	}
	if r := service.DemandRate(full-2_000, full-1_000, 5*time.Minute); r != 1.0/300 {
		t.Errorf("meter refilled to near full: %v, want 1 in 5 minutes (a token charged after it filled)", r)
	}
	if r := service.DemandRate(full-50_000, full-10_000, 5*time.Minute); r != 0 {
		t.Errorf("meter rose past its refill (a reset): %v, want 0", r)
	}
}
