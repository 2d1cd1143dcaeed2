package service

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dynalimit/dynalimit/internal/metrics"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/descriptors"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// moneyLeaseConfig is a monthly budget in dollars per tenant and model (a
// calendar: nothing refills while the clock stands), settled from Envoy AI
// Gateway's input and output tokens, beside a token limit settled from a
// count. %s and %s are gpt-4o's input and output prices in dollars.
const moneyLeaseConfig = `
domain: llm
prices:
  models:
    gpt-4o: {input: "%s", output: "%s"}
adjustments:
  - limit: monthly_usd
    cost:
      input: {metadata: {namespace: io.envoy.ai_gateway, key: llm_input_token}}
      output: {metadata: {namespace: io.envoy.ai_gateway, key: llm_output_token}}
  - limit: tpm
    cost: {header: x-llm-tokens}
descriptors:
  - key: tenant
    entity: true
    descriptors:
      - key: model
        resource: true
        limits:
          - name: monthly_usd
            budget: {usd: 1000000, per: month}
          - {name: tpm, unit: minute, requests_per_unit: 100000000}
`

// budgetMicros is the monthly budget in micro-dollars.
const budgetMicros = 1_000_000 * descriptors.MicrosPerUSD

// moneyLeaseService serves moneyLeaseConfig at the prices p (micro-dollars
// per million tokens), which set changes.
func moneyLeaseService(t *testing.T, p descriptors.Price) (s *Service, f *fakeStore, set func(descriptors.Price), reg func(name string, labels map[string]string) float64) {
	t.Helper()
	var cfg atomic.Pointer[descriptors.Config]
	set = func(p descriptors.Price) {
		cfg.Store(mustConfig(t, fmt.Sprintf(moneyLeaseConfig, descriptors.FormatUSD(p.Input), descriptors.FormatUSD(p.Output))))
	}
	set(p)
	s, f, _, g := leaseServiceOf(t, cfg.Load)
	return s, f, set, func(name string, labels map[string]string) float64 { return counterValue(t, g, name, labels) }
}

// spent returns the nano-dollars the tenant's budget has spent.
func spent(t *testing.T, f *fakeStore) tokenbucket.Millitokens {
	t.Helper()
	return budgetMicros*tokenbucket.PerToken - left(t, f, "acme", "monthly_usd")
}

// left returns the nano-dollars left in the budget limit of entity.
func left(t *testing.T, f *fakeStore, entity, limit string) tokenbucket.Millitokens {
	t.Helper()
	n, ok := f.ref.Tokens(func(k cascade.Key, l string) bool { return k.Entity == entity && l == limit })
	if !ok {
		t.Fatalf("no %s stored for %s", limit, entity)
	}
	return n
}

// admitMoney admits a request estimated at hits tokens and returns its lease.
func admitMoney(t *testing.T, s *Service, hits uint32) string {
	t.Helper()
	req := rlReq("llm", desc("tenant", "acme", "model", "gpt-4o"))
	req.HitsAddend = hits
	resp, err := s.ShouldRateLimit(context.Background(), req)
	if err != nil || resp.GetOverallCode() != pb.RateLimitResponse_OK {
		t.Fatalf("admission: %v %v", resp, err)
	}
	return leaseOfResponse(t, resp)
}

// moneyEnd is the stream-end call of a lease with the input and output
// tokens as descriptor entries, in the order kv gives them around the lease.
func moneyEnd(t *testing.T, s *Service, kv ...string) *pb.RateLimitResponse {
	t.Helper()
	resp, err := s.ShouldRateLimit(context.Background(), rlReq("llm", desc(kv...)))
	if err != nil || resp.GetOverallCode() != pb.RateLimitResponse_OK {
		t.Fatalf("stream end: %v %v", resp, err)
	}
	return resp
}

var gpt4o = descriptors.Price{Input: 3_000_000, Output: 15_000_000}

func TestMoneyLeaseSettlesAtStreamEnd(t *testing.T) {
	s, f, _, counter := moneyLeaseService(t, gpt4o)
	token := admitMoney(t, s, 500)
	if got, want := spent(t, f), gpt4o.Estimate(500); got != want {
		t.Fatalf("after admission: spent %d nano-dollars, want the estimate %d", got, want)
	}
	// The counts may come before or after the lease, in any order.
	moneyEnd(t, s, "llm_output_token", "40000", LeaseKey, token, "llm_input_token", "100000")
	if got := spent(t, f); got != 900_000*tokenbucket.PerToken {
		t.Errorf("after the stream end: spent %d nano-dollars, want $0.90", got)
	}
	if tpm := f.tokens("acme", "tpm"); tpm != 100_000_000-500 {
		t.Errorf("tpm holds %d: its estimate should stand (no count reported)", tpm)
	}
	moneyEnd(t, s, LeaseKey, token, "llm_input_token", "100000", "llm_output_token", "40000")
	if got := spent(t, f); got != 900_000*tokenbucket.PerToken {
		t.Errorf("a replayed stream end moved the budget: spent %d", got)
	}
	if dup := counter("ratelimit_adjustments_total", map[string]string{"path": metrics.PathStreamEnd, "result": metrics.AdjustDuplicate}); dup != 1 {
		t.Errorf("duplicates = %v, want 1", dup)
	}
	if c := counter("ratelimit_adjustment_microdollars_total", map[string]string{"direction": "charged"}); c != 900_000-1_500 {
		t.Errorf("micro-dollars charged by settlements = %v, want %d", c, 900_000-1_500)
	}
}

// TestMoneyLeaseKeepsItsPrice: a price changed on reload after the
// admission does not touch what the admitted request is charged.
func TestMoneyLeaseKeepsItsPrice(t *testing.T) {
	s, f, set, _ := moneyLeaseService(t, gpt4o)
	token := admitMoney(t, s, 500)
	set(descriptors.Price{Input: 30_000_000, Output: 150_000_000})
	moneyEnd(t, s, LeaseKey, token, "llm_input_token", "100000", "llm_output_token", "40000")
	if got := spent(t, f); got != 900_000*tokenbucket.PerToken {
		t.Errorf("spent %d nano-dollars, want $0.90 at the admission's prices", got)
	}
	// A request admitted after the reload is estimated at the new prices.
	admitMoney(t, s, 500)
	if got := spent(t, f); got != 900_000*tokenbucket.PerToken+15_000_000 {
		t.Errorf("spent %d nano-dollars, want $0.90 and an estimate of $0.015", got)
	}
}

// TestMoneyLeaseWithoutBothCounts: a count alone settles the limits not
// in dollars; one token count alone settles nothing in dollars.
func TestMoneyLeaseWithoutBothCounts(t *testing.T) {
	s, f, _, _ := moneyLeaseService(t, gpt4o)
	token := admitMoney(t, s, 500)
	end := rlReq("llm", withHits(desc(LeaseKey, token, "llm_input_token", "100000"), 2000))
	if _, err := s.ShouldRateLimit(context.Background(), end); err != nil {
		t.Fatal(err)
	}
	if got := spent(t, f); got != gpt4o.Estimate(500) {
		t.Errorf("spent %d nano-dollars, want the estimate %d to stand", got, gpt4o.Estimate(500))
	}
	if tpm := f.tokens("acme", "tpm"); tpm != 100_000_000-2000 {
		t.Errorf("tpm holds %d, want the count of 2,000 settled", tpm)
	}
}

func TestMoneyLeaseBadCountIsInvalid(t *testing.T) {
	s, f, _, _ := moneyLeaseService(t, gpt4o)
	token := admitMoney(t, s, 500)
	_, err := s.ShouldRateLimit(context.Background(), rlReq("llm", desc(LeaseKey, token, "llm_input_token", "1.5", "llm_output_token", "1")))
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a fractional count = %v, want InvalidArgument", err)
	}
	// Another entry beside the lease: a descriptor decided as before (no
	// rule has it), not a settlement.
	resp, err := s.ShouldRateLimit(context.Background(), rlReq("llm", desc(LeaseKey, token, "tenant", "acme")))
	if err != nil || resp.GetOverallCode() != pb.RateLimitResponse_OK {
		t.Fatalf("lease and tenant: %v %v", resp, err)
	}
	if got := spent(t, f); got != gpt4o.Estimate(500) {
		t.Errorf("spent %d nano-dollars, want the estimate to stand", got)
	}
}

// TestMoneyChargedThroughLeasesIsThePricedReports is the property: over
// random prices, estimates and token counts, the nano-dollars a budget
// spends through leases (estimates and settlements) are the sum of the
// priced reports, exactly; each stream end delivered twice settles once.
func TestMoneyChargedThroughLeasesIsThePricedReports(t *testing.T) {
	rng := rand.New(rand.NewPCG(28, 2))
	s, f, set, counter := moneyLeaseService(t, gpt4o)
	var want tokenbucket.Millitokens
	const rounds = 200
	for round := range rounds {
		p := descriptors.Price{Input: rng.Int64N(100_000_000), Output: rng.Int64N(100_000_000)}
		set(p)
		token := admitMoney(t, s, uint32(rng.IntN(1_000_000)))
		in, out := rng.Uint64N(2_000_000), rng.Uint64N(2_000_000)
		set(descriptors.Price{Input: rng.Int64N(100_000_000), Output: rng.Int64N(100_000_000)}) // a reload before the report
		for range 2 {
			moneyEnd(t, s, LeaseKey, token, "llm_input_token", fmt.Sprint(in), "llm_output_token", fmt.Sprint(out))
		}
		want += p.Cost(in, out)
		if got := spent(t, f); got != want {
			t.Fatalf("round %d: price %+v, report %d in %d out: spent %d nano-dollars, want %d", round, p, in, out, got, want)
		}
	}
	if dup := counter("ratelimit_adjustments_total", map[string]string{"path": metrics.PathStreamEnd, "result": metrics.AdjustDuplicate}); dup != rounds {
		t.Errorf("duplicates = %v, want %d", dup, rounds)
	}
	t.Logf("%d leases: $%s spent, to the nano-dollar", rounds, descriptors.FormatUSD(int64(want/tokenbucket.PerToken)))
}

// TestMoneyLeaseSettlesEveryLevel: a team's budget over a project's, each
// settled by its own adjustment from the same report: both levels are
// charged the request's price, once.
func TestMoneyLeaseSettlesEveryLevel(t *testing.T) {
	cfg := mustConfig(t, `
domain: llm
prices:
  default: {input: 3, output: 15, request: "0.01"}
adjustments:
  - limit: team_usd
    cost: {input: {header: x-in}, output: {header: x-out}}
  - limit: project_usd
    cost: {input: {header: x-in}, output: {header: x-out}}
descriptors:
  - key: team
    entity: true
    budget: {name: team_usd, usd: 2000, per: month}
    descriptors:
      - key: project
        entity: true
        cascade: true
        budget: {name: project_usd, usd: 1000, per: month}
`)
	s, f, _, _ := leaseServiceOf(t, func() *descriptors.Config { return cfg })
	resp, err := s.ShouldRateLimit(context.Background(), rlReq("llm", withHits(desc("team", "ml", "project", "a"), 0)))
	if err != nil || resp.GetOverallCode() != pb.RateLimitResponse_OK {
		t.Fatalf("check: %v %v", resp, err)
	}
	token := leaseOfResponse(t, resp)
	for range 2 {
		moneyEnd(t, s, LeaseKey, token, "llm_input_token", "100000", "llm_output_token", "40000")
	}
	const price = 910_000 * tokenbucket.PerToken // $0.90 and a cent
	if got := left(t, f, "ml", "team_usd"); got != 2000*descriptors.MicrosPerUSD*tokenbucket.PerToken-price {
		t.Errorf("the team has %d nano-dollars left, want $2,000 − $0.91", got)
	}
	if got := left(t, f, "a", "project_usd"); got != 1000*descriptors.MicrosPerUSD*tokenbucket.PerToken-price {
		t.Errorf("the project has %d nano-dollars left, want $1,000 − $0.91", got)
	}
}

// FuzzMoneySettle settles a genuine lease with arbitrary counts beside it,
// in any order: the call is OK or InvalidArgument (a count that is not a
// whole number); the budget has spent the priced report when both counts
// are whole, else the estimate, never anything else.
func FuzzMoneySettle(f *testing.F) {
	f.Add("100000", "40000", uint8(0), true)
	f.Add("0", "18446744073709551615", uint8(1), true)
	f.Add("1.5", "1", uint8(2), false)
	f.Add("", "7", uint8(3), true)
	f.Fuzz(func(t *testing.T, in, out string, order uint8, withOut bool) {
		s, f, _, _ := moneyLeaseService(t, gpt4o)
		token := admitMoney(t, s, 500)
		kv := []string{LeaseKey, token, "llm_input_token", in}
		if withOut {
			kv = append(kv, "llm_output_token", out)
		}
		for i := 0; i < int(order)%3 && len(kv) > 2; i++ {
			kv = append(kv[2:], kv[:2]...) // rotate the pairs
		}
		resp, err := s.ShouldRateLimit(context.Background(), rlReq("llm", desc(kv...)))
		want := gpt4o.Estimate(500)
		inN, inErr := strconv.ParseUint(in, 10, 64)
		outN, outErr := strconv.ParseUint(out, 10, 64)
		whole := inErr == nil && inN <= MaxHits && (!withOut || (outErr == nil && outN <= MaxHits))
		switch {
		case !whole:
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("counts %q %q: %v %v, want InvalidArgument", in, out, resp, err)
			}
		case err != nil || resp.GetOverallCode() != pb.RateLimitResponse_OK:
			t.Fatalf("counts %q %q: %v %v, want OK", in, out, resp, err)
		case withOut:
			want = gpt4o.Cost(inN, outN)
		}
		if got := spent(t, f); got != want {
			t.Fatalf("counts %q %q (output %v): spent %d nano-dollars, want %d", in, out, withOut, got, want)
		}
	})
}
