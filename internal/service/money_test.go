package service

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dynalimit/dynalimit/internal/metrics"
	"github.com/dynalimit/dynalimit/pkg/descriptors"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// moneyConfig is the rig: $3 and $15 per million input and output
// tokens, and a daily budget of $1 per tenant in New York.
const moneyConfig = `
domain: llm
prices:
  models:
    gpt-4o: {input: 3, output: 15}
descriptors:
  - key: tenant
    entity: true
    descriptors:
      - key: model
        resource: true
        budget: {name: daily_usd, usd: 1, per: day, zone: America/New_York, debt: %s}
`

// check and report are the two calls of a request: a check before it, and
// a stream-end call reporting 100k input and 40k output tokens ($0.90).
func moneyCheck() *pb.RateLimitRequest {
	return rlReq("llm", withHits(desc("tenant", "acme", "model", "gpt-4o"), 0))
}

func moneyReport() *pb.RateLimitRequest {
	return rlReq("llm", withHits(desc("tenant", "acme", "model", "gpt-4o", "llm_input_token", "100000", "llm_output_token", "40000"), 0))
}

// untilMidnight is the time from the fake clock's start to the next local
// midnight in New York.
func untilMidnight(t *testing.T) time.Duration {
	c, err := tokenbucket.NewCalendar(tokenbucket.Daily, "America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	return time.Duration(c.Start(c.Index(t0)+1)-t0) * time.Millisecond
}

// Two requests are admitted, the second takes the budget $0.80 into debt,
// the third is refused until local midnight, and the next day starts with
// the debt carried (or forgiven).
func TestMoneyBudgetDay(t *testing.T) {
	for debt, after := range map[string]string{"carry": "OK [OK/200000/1000000]", "forgive": "OK [OK/1000000/1000000]"} {
		t.Run(debt, func(t *testing.T) {
			st := newFakeStore()
			cfg := mustConfig(t, strings.Replace(moneyConfig, "%s", debt, 1))
			svc := New(st, func() *descriptors.Config { return cfg })
			runSteps(t, svc, st, []step{
				{req: moneyCheck(), want: "OK [OK/1000000/1000000]"},
				{req: moneyReport(), want: "OK [OK/100000/1000000]"},
				{req: moneyCheck(), want: "OK [OK/100000/1000000]"},
				{req: moneyReport(), want: "OVER [OVER/0/1000000]"}, // it did not fit: $0.80 in debt
				{req: moneyCheck(), want: "OVER [OVER/0/1000000]"},
				{req: moneyCheck(), advance: untilMidnight(t) - time.Millisecond, want: "OVER [OVER/0/1000000]"},
				{req: moneyCheck(), advance: time.Millisecond, want: after},
			})
			if got := st.tokens("acme", "daily_usd"); debt == "carry" && got != 200_000 {
				t.Errorf("the budget holds %d micro-dollars", got)
			}
		})
	}
}

// The RateLimit headers of a money limit are in dollars, and a refused
// check is told to come back at local midnight.
func TestMoneyHeaders(t *testing.T) {
	st := newFakeStore()
	cfg := mustConfig(t, strings.Replace(moneyConfig, "%s", "carry", 1))
	reg := prometheus.NewRegistry()
	svc := New(st, func() *descriptors.Config { return cfg }, WithResponseHeaders(true, "", "", ""), WithDynamicMetadata(true), WithMetrics(metrics.New(reg)))
	for _, r := range []*pb.RateLimitRequest{moneyCheck(), moneyReport()} {
		if _, err := svc.ShouldRateLimit(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := svc.ShouldRateLimit(context.Background(), moneyCheck())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, h := range resp.GetResponseHeadersToAdd() {
		got[h.GetKey()] = h.GetValue()
	}
	if got[DefaultLimitHeader] != "1.00" || got[DefaultRemainingHeader] != "0.10" {
		t.Errorf("headers %v", got)
	}
	b := resp.GetDynamicMetadata().GetFields()[BudgetKey].GetStructValue().GetFields()
	if b["limit"].GetStringValue() != "daily_usd" || b["total"].GetStringValue() != "1.00" || b["remaining"].GetStringValue() != "0.10" ||
		b["unit"].GetStringValue() != "usd" || b["period"].GetStringValue() != "day@America/New_York" {
		t.Errorf("metadata %v", b)
	}
	runSteps(t, svc, st, []step{{req: moneyReport(), want: "OVER [OVER/0/1000000]"}})
	if got := counterValue(t, reg, "ratelimit_money_charged_microdollars_total", map[string]string{"domain": "llm", "resource": "gpt-4o"}); got != 1_800_000 {
		t.Errorf("money charged = %v micro-dollars, want the two reports' 1,800,000", got)
	}
	resp, _ = svc.ShouldRateLimit(context.Background(), moneyCheck())
	for _, h := range resp.GetResponseHeadersToAdd() {
		if h.GetKey() == DefaultResetHeader && h.GetValue() != strconv.FormatInt(int64(untilMidnight(t)/time.Second), 10) {
			t.Errorf("refused until %s s, want the %v to midnight", h.GetValue(), untilMidnight(t))
		}
	}
}

// A team's $2,000 a month over three projects of $1,000: the team refuses
// once its total is spent, whichever projects spent it. Each request costs
// its price per request, $100.
func TestMoneyBudgetHierarchy(t *testing.T) {
	const cfgText = `
domain: llm
prices:
  default: {request: 100}
descriptors:
  - key: team
    entity: true
    budget: {name: team_usd, usd: 2000, per: month}
    descriptors:
      - key: project
        entity: true
        cascade: true
        budget: {name: project_usd, usd: 1000, per: month}
`
	st := newFakeStore()
	cfg := mustConfig(t, cfgText)
	svc := New(st, func() *descriptors.Config { return cfg })
	spend := func(project string, n int) (admitted int) {
		for range n {
			resp, err := svc.ShouldRateLimit(context.Background(), rlReq("llm", desc("team", "ml", "project", project)))
			if err != nil {
				t.Fatal(err)
			}
			if resp.GetOverallCode() == pb.RateLimitResponse_OK {
				admitted++
			}
		}
		return admitted
	}
	if got := spend("p1", 12); got != 10 {
		t.Errorf("p1: %d admitted, want its $1,000", got)
	}
	if got := spend("p2", 4); got != 4 {
		t.Errorf("p2: %d admitted", got)
	}
	if got := spend("p3", 12); got != 6 {
		t.Errorf("p3: %d admitted, want the team's last $600", got)
	}
	if got := st.tokens("ml", "team_usd"); got != 0 {
		t.Errorf("the team holds %d", got)
	}
}

func TestMoneyInvalid(t *testing.T) {
	const cfgText = `
domain: llm
prices:
  models:
    gpt-4o: {input: 3, output: 15}
descriptors:
  - key: model
    budget: {usd: 1, per: day}
`
	cfg := mustConfig(t, cfgText)
	svc := New(newFakeStore(), func() *descriptors.Config { return cfg })
	for _, c := range []struct {
		req  *pb.RateLimitRequest
		want string
	}{
		{rlReq("llm", desc("model", "gpt-5")), `no price for model "gpt-5" and no default`},
		{rlReq("llm", desc("model", "gpt-4o", "llm_input_token", "-3")), `reports llm_input_token "-3": want a whole number`},
		{rlReq("llm", desc("model", "gpt-4o", "llm_output_token", "1e9")), `reports llm_output_token "1e9"`},
	} {
		_, err := svc.ShouldRateLimit(context.Background(), c.req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want InvalidArgument saying %q", c.req, err, c.want)
		}
	}
}
