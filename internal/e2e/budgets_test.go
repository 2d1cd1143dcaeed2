package e2e

import (
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/internal/envoytest"
	"github.com/dynalimit/dynalimit/internal/testutil"
)

// budgetsBootstrap spends a tenant's budget in dollars
// (examples/envoy/config/budgets.yaml: $1 a calendar minute in UTC, $3 and
// $15 per million input and output tokens, debt carried).
const budgetsBootstrap = "examples/envoy/envoy-budgets.yaml"

const (
	// budgetsPath asks the application for a response that reports 100,000
	// input and 40,000 output tokens: $0.30 + $0.60 = $0.90.
	budgetsPath = "/v1/chat?header=x-llm-input-tokens:100000&header=x-llm-output-tokens:40000"
	// budgetsCost is that response's price in micro-dollars.
	budgetsCost = 900_000
	// budgetsCharged is the service's count of micro-dollars charged (the
	// domain prices no model by name: its default price is "other").
	budgetsCharged = `ratelimit_money_charged_microdollars_total{domain="budgets",resource="other"}`
	// budgetsDecisions counts the calls on the domain that were answered OK.
	budgetsDecisions = `ratelimit_decisions_total{code="OK",domain="budgets"}`
	// budgetsMargin is how long after a minute's boundary the test waits
	// before it counts on the new minute.
	budgetsMargin = 300 * time.Millisecond
)

// TestBudgetThroughEnvoy runs the budget through Envoy: each
// response reports 100k input and 40k output tokens ($0.90), which Envoy
// moves from response headers into io.envoy.ai_gateway metadata as numbers
// (as Envoy AI Gateway leaves them) and sends with its stream-end call. Of a
// $1 budget a minute, the first request is admitted with $1.00 left, the
// second with $0.10 and its charge takes the budget $0.80 into debt, the
// third is refused until the minute ends. The next minute starts with the
// debt carried: $0.20 admit a request, and the one after it is refused.
//
// On the embedded store and on DynamoDB. It also pins why the example reads the counts with a CEL expression:
// Envoy's `metadata` action, given the same numbers, drops the descriptor
// and nothing is charged.
func TestBudgetThroughEnvoy(t *testing.T) {
	t.Parallel() // beside the other long runs (TestRLQSFleet)
	envoytest.Scenario(t, "13 a $1 budget a minute in dollars, priced from Envoy AI Gateway's token metadata: 200 200 429, then the next minute starts $0.80 short (200 429) (memory, DynamoDB and Redis)")
	t.Run("metadata action drops numbers", budgetsMetadataAction)
	t.Run("two minutes", func(t *testing.T) { onStores(t, budgetsTwoMinutes) })
}

// budgetsTwoMinutes spends the budget in one minute and what the debt
// leaves of it in the next, on a service started with env.
func budgetsTwoMinutes(t *testing.T, env []string) {
	// Each store's run waits for a minute's edge: the three wait for the
	// same one, side by side (each its own Envoy, service and store).
	t.Parallel()
	r := envoytest.Start(t, envoytest.Options{
		Bootstrap: budgetsBootstrap,
		ConfigDir: configDir,
		Env:       append([]string{"LIMIT_RESPONSE_HEADERS_ENABLED=true"}, env...),
	})
	c := envoytest.Client(t, "127.0.0.30")

	// The first minute's three requests take a few seconds; start them in
	// a minute that has enough of itself left, so that the run waits for
	// one boundary only.
	minute := startOfMinuteWith(20 * time.Second)
	charged := 0
	for i, want := range []budgetStep{
		{status: http.StatusOK, remaining: "1.00", full: true},
		{status: http.StatusOK, remaining: "0.10"},
		{status: http.StatusTooManyRequests, remaining: "0.00"},
	} {
		budgetRequest(t, r, c, i+1, want, &charged)
	}
	if now := time.Now(); !now.Before(minute.Add(time.Minute)) {
		t.Fatalf("the first minute's requests ended at %s, after its end: the scenario needs them within the minute from %s",
			now.Format(time.RFC3339Nano), minute.Format(time.RFC3339))
	}

	// The next minute starts $0.80 short: $0.20 admit one request, whose
	// charge takes the budget $0.70 into debt.
	time.Sleep(time.Until(minute.Add(time.Minute + budgetsMargin)))
	for i, want := range []budgetStep{
		{status: http.StatusOK, remaining: "0.20"},
		{status: http.StatusTooManyRequests, remaining: "0.00"},
	} {
		budgetRequest(t, r, c, i+4, want, &charged)
	}
	if got, want := r.App.Requests("/v1/chat"), 3; got != want {
		t.Errorf("the application saw %d requests, want %d (the refused ones stop at Envoy)", got, want)
	}
}

// startOfMinuteWith returns the start of the current UTC minute when at
// least need of it is left; otherwise it waits until just after the next
// one starts and returns that.
func startOfMinuteWith(need time.Duration) time.Time {
	now := time.Now()
	minute := now.Truncate(time.Minute)
	if minute.Add(time.Minute).Sub(now) >= need {
		return minute
	}
	next := minute.Add(time.Minute)
	time.Sleep(time.Until(next.Add(budgetsMargin)))
	return next
}

// budgetStep is what a client sees for one request: its status, the
// RateLimit-Remaining header in dollars from the check before it, and
// whether the budget was full (RateLimit-Reset 0) rather than waiting for
// the minute's end.
type budgetStep struct {
	status    int
	remaining string
	full      bool
}

// budgetRequest sends request n for tenant acme and checks what the client
// sees. An admitted request's response is charged when its stream is done:
// it waits until the service has counted that charge.
func budgetRequest(t *testing.T, r *envoytest.Rig, c *http.Client, n int, want budgetStep, charged *int) {
	t.Helper()
	resp := r.Do(t, c, http.MethodGet, budgetsPath, "x-tenant", "acme", "x-ai-eg-model", "gpt-x")
	untilEnd := time.Until(time.Now().Truncate(time.Minute).Add(time.Minute)).Seconds()
	t.Logf("request %d: %d, RateLimit-Remaining %s, RateLimit-Reset %s (%.1fs to the minute's end)", n, resp.Status,
		resp.Header.Get("RateLimit-Remaining"), resp.Header.Get("RateLimit-Reset"), untilEnd)
	if resp.Status != want.status {
		t.Fatalf("request %d: status %d, want %d (headers %v)", n, resp.Status, want.status, resp.Header)
	}
	if got := resp.Header.Get("RateLimit-Remaining"); got != want.remaining {
		t.Errorf("request %d: RateLimit-Remaining = %q, want %q", n, got, want.remaining)
	}
	if got := resp.Header.Get("RateLimit-Limit"); got != "1.00" {
		t.Errorf("request %d: RateLimit-Limit = %q, want \"1.00\"", n, got)
	}
	// Not full, the budget is full again (or the refusal lifted) when the
	// minute ends.
	reset := headerInt(t, resp, "RateLimit-Reset")
	if want.full && reset != 0 {
		t.Errorf("request %d: RateLimit-Reset = %d, want 0 (full)", n, reset)
	}
	if !want.full && math.Abs(float64(reset)-untilEnd) > 1.5 {
		t.Errorf("request %d: RateLimit-Reset = %d, want the %.1fs to the minute's end", n, reset, untilEnd)
	}
	if want.status != http.StatusOK {
		return
	}
	*charged += budgetsCost
	if !testutil.Eventually(10*time.Second, func() bool { return metric(t, r, budgetsCharged) == float64(*charged) }) {
		t.Fatalf("after request %d: %s = %v, want %d once its stream-end charge landed", n, budgetsCharged, metric(t, r, budgetsCharged), *charged)
	}
}

// budgetsMetadataAction runs the example with `metadata` actions in place of
// its CEL expressions, plus a marker: a stream-end check of (tenant, model)
// alone, which Envoy sends in the same call as the charge. The marker
// arrives, the charge does not: Envoy's metadata action reads no NUMBER.
func budgetsMetadataAction(t *testing.T) {
	who := []any{
		map[string]any{"request_headers": map[string]any{"header_name": "x-tenant", "descriptor_key": "tenant"}},
		map[string]any{"request_headers": map[string]any{"header_name": "x-ai-eg-model", "descriptor_key": "model"}},
	}
	count := func(key string) any {
		return map[string]any{"metadata": map[string]any{
			"descriptor_key": key,
			"metadata_key":   map[string]any{"key": "io.envoy.ai_gateway", "path": []any{map[string]any{"key": key}}},
			"source":         "DYNAMIC",
		}}
	}
	r := envoytest.Start(t, envoytest.Options{
		Bootstrap: budgetsBootstrap,
		ConfigDir: configDir,
		Edits: []envoytest.Edit{envoytest.SetRouteRateLimits([]any{
			map[string]any{"actions": who, "apply_on_stream_done": true, "hits_addend": map[string]any{"number": 0}},
			map[string]any{"actions": append(append([]any{}, who...), count("llm_input_token"), count("llm_output_token")), "apply_on_stream_done": true},
		})},
	})
	c := envoytest.Client(t, "127.0.0.31")
	resp := r.Do(t, c, http.MethodGet, budgetsPath, "x-tenant", "acme", "x-ai-eg-model", "gpt-x")
	if resp.Status != http.StatusOK {
		t.Fatalf("status %d, want 200 (no check before the request here)", resp.Status)
	}
	if !testutil.Eventually(10*time.Second, func() bool { return metric(t, r, budgetsDecisions) == 1 }) {
		t.Fatalf("%s = %v, want 1: the stream-end call with the marker", budgetsDecisions, metric(t, r, budgetsDecisions))
	}
	if got := metric(t, r, budgetsCharged); got != 0 {
		t.Errorf("%s = %v, want 0: Envoy %s's metadata action read the NUMBER counts (a charge of %d); if it now does, the example may use it",
			budgetsCharged, got, envoytest.Version, budgetsCost)
	}
}
