package service

import (
	"context"
	"sync"
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/dynalimit/dynalimit/internal/adjust"
	"github.com/dynalimit/dynalimit/internal/lease"
	"github.com/dynalimit/dynalimit/internal/metrics"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/descriptors"
)

// leaseConfig is a three-level chain (tenant → project → key, cascading)
// with a tokens-per-minute limit on every level, settled from a header.
const leaseConfig = `
domain: llm
adjustments:
  - limit: tpm
    cost: {header: x-llm-tokens}
descriptors:
  - key: tenant
    entity: true
    limits: [{name: tpm, unit: minute, requests_per_unit: 10000}]
    descriptors:
      - key: project
        entity: true
        limits: [{name: tpm, unit: minute, requests_per_unit: 10000}]
        descriptors:
          - key: api_key
            entity: true
            cascade: true
            limits: [{name: tpm, unit: minute, requests_per_unit: 10000}]
`

// refSettler settles on the fake store's reference buckets, once per ID.
type refSettler struct {
	f    *fakeStore
	mu   sync.Mutex
	seen map[string]bool
}

func (r *refSettler) Settle(ctx context.Context, s *cascade.Settlement) (cascade.Settled, error) {
	if err := s.Validate(); err != nil {
		return cascade.Settled{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen[s.ID] {
		return cascade.Settled{Duplicate: true}, nil
	}
	r.seen[s.ID] = true
	if len(s.Debits) == 0 {
		return cascade.Settled{}, nil
	}
	dec, err := r.f.ref.Acquire(ctx, &cascade.Plan{Debits: s.Debits})
	return cascade.Settled{Statuses: dec.Statuses}, err
}

func leaseService(t *testing.T) (*Service, *fakeStore, *adjust.Adjuster, prometheus.Gatherer) {
	t.Helper()
	cfg := mustConfig(t, leaseConfig)
	return leaseServiceOf(t, func() *descriptors.Config { return cfg })
}

// leaseServiceOf is leaseService with the configuration config returns.
func leaseServiceOf(t *testing.T, config func() *descriptors.Config) (*Service, *fakeStore, *adjust.Adjuster, prometheus.Gatherer) {
	t.Helper()
	f := newFakeStore()
	k, err := lease.NewKeyring([]byte("a key of at least thirty-two bytes!!"))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	a := adjust.New(adjust.Options{
		Settler: &refSettler{f: f, seen: map[string]bool{}},
		Keys:    func() *lease.Keyring { return k },
		Metrics: m,
		Now:     f.clock.Now,
	})
	t.Cleanup(a.Close)
	s := New(f, config, WithAdjuster(a), WithMetrics(m), WithClock(f.clock.Now))
	return s, f, a, reg
}

func chainHits(hits uint64) *pb.RateLimitRequest {
	r := rlReq("llm", desc("tenant", "acme", "project", "payments", "api_key", "k1"))
	r.HitsAddend = uint32(hits)
	return r
}

func leaseOfResponse(t *testing.T, resp *pb.RateLimitResponse) string {
	t.Helper()
	v := resp.GetDynamicMetadata().GetFields()[LeaseKey].GetStringValue()
	if v == "" {
		t.Fatalf("no lease in the response's dynamic metadata: %v", resp.GetDynamicMetadata())
	}
	return v
}

// streamEnd is Envoy's stream-end call carrying the lease, with the
// actual cost as the descriptor's hits_addend.
func streamEnd(token string, actual uint64) *pb.RateLimitRequest {
	d := desc(LeaseKey, token)
	d.HitsAddend = wrapperspb.UInt64(actual)
	return rlReq("llm", d)
}

func levels(f *fakeStore) [3]int64 {
	return [3]int64{f.tokens("k1", "tpm"), f.tokens("payments", "tpm"), f.tokens("acme", "tpm")}
}

func TestLeaseSettlesEveryLevelAtStreamEnd(t *testing.T) {
	for _, tc := range []struct {
		actual uint64
		want   int64 // tokens on each level after the settlement
	}{
		{2000, 10000 - 2000}, // 1,500 more than the estimate
		{100, 10000 - 100},   // a refund of 400
	} {
		s, f, _, reg := leaseService(t)
		resp, err := s.ShouldRateLimit(context.Background(), chainHits(500))
		if err != nil || resp.GetOverallCode() != pb.RateLimitResponse_OK {
			t.Fatalf("admission: %v %v", resp, err)
		}
		before := levels(f)
		token := leaseOfResponse(t, resp)
		end, err := s.ShouldRateLimit(context.Background(), streamEnd(token, tc.actual))
		if err != nil || end.GetOverallCode() != pb.RateLimitResponse_OK {
			t.Fatalf("stream end: %v %v", end, err)
		}
		after := levels(f)
		for i := range after {
			if after[i] != tc.want {
				t.Errorf("actual %d: level %d holds %d (before %d), want %d", tc.actual, i, after[i], before[i], tc.want)
			}
		}
		// The same lease again, by the other path or replayed: nothing moves.
		if _, err := s.ShouldRateLimit(context.Background(), streamEnd(token, tc.actual)); err != nil {
			t.Fatal(err)
		}
		if again := levels(f); again != after {
			t.Errorf("a replayed stream end moved the buckets: %v → %v", after, again)
		}
		dup := counterValue(t, reg, "ratelimit_adjustments_total", map[string]string{"path": metrics.PathStreamEnd, "result": metrics.AdjustDuplicate})
		if dup != 1 {
			t.Errorf("duplicates = %v, want 1", dup)
		}
	}
}

func TestStreamEndWithoutCostKeepsTheEstimate(t *testing.T) {
	s, f, _, _ := leaseService(t)
	resp, _ := s.ShouldRateLimit(context.Background(), chainHits(500))
	token := leaseOfResponse(t, resp)
	before := levels(f)
	// No hits_addend of its own (Envoy found no cost): nothing is settled.
	if _, err := s.ShouldRateLimit(context.Background(), rlReq("llm", desc(LeaseKey, token))); err != nil {
		t.Fatal(err)
	}
	if after := levels(f); after != before {
		t.Errorf("a stream end without a cost moved the buckets: %v → %v", before, after)
	}
}

func TestForgedLeaseAtStreamEndMovesNothing(t *testing.T) {
	s, f, _, reg := leaseService(t)
	resp, _ := s.ShouldRateLimit(context.Background(), chainHits(500))
	token := leaseOfResponse(t, resp)
	before := levels(f)
	forged := []byte(token)
	i := len(forged) / 2
	forged[i] = map[bool]byte{true: 'B', false: 'A'}[forged[i] == 'A'] // still base64url: a changed body
	end, err := s.ShouldRateLimit(context.Background(), streamEnd(string(forged), 0))
	if err != nil || end.GetOverallCode() != pb.RateLimitResponse_OK {
		t.Fatalf("stream end with a forged lease: %v %v", end, err)
	}
	if after := levels(f); after != before {
		t.Errorf("a forged lease moved the buckets: %v → %v", before, after)
	}
	failed := counterValue(t, reg, "ratelimit_lease_verification_failures_total", map[string]string{"path": metrics.PathStreamEnd, "reason": "bad_signature"})
	if failed != 1 {
		t.Errorf("verification failures = %v, want 1", failed)
	}
}

func TestNoLeaseWithoutAdjustments(t *testing.T) {
	s, _, _, _ := leaseService(t)
	// A refused admission carries no lease.
	resp, _ := s.ShouldRateLimit(context.Background(), chainHits(20000))
	if resp.GetOverallCode() != pb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("20,000 of 10,000 admitted: %v", resp)
	}
	if _, ok := resp.GetDynamicMetadata().GetFields()[LeaseKey]; ok {
		t.Error("a refused request carries a lease")
	}
	// A domain without adjustments issues none.
	resp, _ = s.ShouldRateLimit(context.Background(), rlReq("other", desc("k", "v")))
	if _, ok := resp.GetDynamicMetadata().GetFields()[LeaseKey]; ok {
		t.Error("a domain without adjustments issued a lease")
	}
}

// pathConfig is a rule with one unnamed limit, as Envoy Gateway pushes
// them, settled by an adjustment that selects it by its descriptor path.
const pathConfig = `
domain: gw
adjustments:
  - limit: usage
    descriptor: [{key: route, value: chat}]
    cost: {metadata: {namespace: io.envoy.ai_gateway, key: llm_total_token}}
descriptors:
  - key: route
    value: chat
    rate_limit: {unit: hour, requests_per_unit: 1000}
`

func TestLeaseNamesTheAdjustmentOfAnUnnamedLimit(t *testing.T) {
	f := newFakeStore()
	k, _ := lease.NewKeyring([]byte("a key of at least thirty-two bytes!!"))
	a := adjust.New(adjust.Options{Settler: &refSettler{f: f, seen: map[string]bool{}}, Keys: func() *lease.Keyring { return k }, Now: f.clock.Now})
	t.Cleanup(a.Close)
	cfg := mustConfig(t, pathConfig)
	s := New(f, func() *descriptors.Config { return cfg }, WithAdjuster(a), WithClock(f.clock.Now))
	resp, err := s.ShouldRateLimit(context.Background(), rlReq("gw", desc("route", "chat")))
	if err != nil {
		t.Fatal(err)
	}
	l, err := k.Verify(leaseOfResponse(t, resp), f.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	if lm := l.Buckets[0].Limits[0]; lm.Name != "default" || lm.Adjustment != "usage" {
		t.Errorf("leased limit %+v, want the bucket's limit default settled by the adjustment usage", lm)
	}
}
