package e2e

import (
	"fmt"
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/internal/envoytest"
	"github.com/dynalimit/dynalimit/internal/testutil"
)

const costBootstrap = "examples/envoy/envoy-cost.yaml"

// cost starts the cost example with the access-log cluster pointed at a
// test receiver.
func cost(t *testing.T) (*envoytest.Rig, *envoytest.ALS) {
	t.Helper()
	als := envoytest.StartALS(t)
	r := envoytest.Start(t, envoytest.Options{
		Bootstrap: costBootstrap,
		ConfigDir: configDir,
		Env:       []string{"RESPONSE_DYNAMIC_METADATA=true", "LIMIT_RESPONSE_HEADERS_ENABLED=true"},
		Clusters:  map[string]string{"accesslog": als.Addr},
	})
	return r, als
}

// costHits is the service's count of hits on the cost rule: 0 per check,
// the cost per stream-done charge.
const costHits = `ratelimit_rule_hits_total{key="cost.api_key"}`

// TestStreamDoneCharge: the application reports a cost in x-request-cost,
// Envoy moves it into dynamic metadata, and its apply_on_stream_done action
// sends it as hits_addend. The next request sees the key's budget debited by
// exactly that cost; a cost beyond the budget puts the key in debt and its
// next request is refused.
func TestStreamDoneCharge(t *testing.T) {
	t.Parallel()
	envoytest.Scenario(t, "5 stream-done charges: the reported cost is debited exactly")
	r, _ := cost(t)
	c := envoytest.Client(t, "127.0.0.10")
	start := time.Now()
	const budget = 10000

	// charge sends a request whose response reports cost. Its x-ratelimit
	// headers come from the check before it, so they show the budget less
	// every earlier charge; then it waits until the service has received
	// this request's charge.
	charged := 0
	charge := func(cost int) {
		t.Helper()
		before := metric(t, r, costHits)
		resp := r.Do(t, c, http.MethodGet, fmt.Sprintf("/v1/work?header=x-request-cost:%d&chunks=3", cost), "x-api-key", "key-a")
		if resp.Status != http.StatusOK {
			t.Fatalf("request with cost %d: status %d, want 200 (headers %v)", cost, resp.Status, resp.Header)
		}
		if resp.Body != "chunk 0\nchunk 1\nchunk 2\n" {
			t.Errorf("streamed body = %q, want three chunks", resp.Body)
		}
		want := budget - charged
		refill := int(math.Ceil(time.Since(start).Hours() * budget))
		if got := headerInt(t, resp, "x-ratelimit-remaining"); got < want || got > want+refill {
			t.Errorf("x-ratelimit-remaining = %d after %d charged, want %d (+%d refilled at most)", got, charged, want, refill)
		}
		if !testutil.Eventually(5*time.Second, func() bool { return metric(t, r, costHits) >= before+float64(cost) }) {
			t.Fatalf("the stream-done charge of %d did not reach the service within 5s: %s = %v, was %v",
				cost, costHits, metric(t, r, costHits), before)
		}
		if got := metric(t, r, costHits); got != before+float64(cost) {
			t.Fatalf("%s = %v after a charge of %d, want %v", costHits, got, cost, before+float64(cost))
		}
		charged += cost
	}

	charge(250)    // sees the full budget
	charge(40)     // sees 10,000 − 250
	charge(budget) // sees 10,000 − 290, and takes the key into debt
	resp := r.Do(t, c, http.MethodGet, "/v1/work", "x-api-key", "key-a")
	if resp.Status != http.StatusTooManyRequests {
		t.Fatalf("request of a key in debt: status %d, want 429", resp.Status)
	}
	if got := r.App.Requests("/v1/work"); got != 3 {
		t.Errorf("application saw %d requests, want 3", got)
	}
	// Another key has its own budget.
	if resp := r.Do(t, c, http.MethodGet, "/v1/work", "x-api-key", "key-b"); resp.Status != http.StatusOK {
		t.Errorf("request of another key: status %d, want 200", resp.Status)
	}
	if got, want := r.Envoy.RateLimitStats(t, appCluster), (envoytest.FilterStats{OK: 4, OverLimit: 1}); got != want {
		t.Errorf("envoy %s, want %s (stream-done calls are not counted)", got, want)
	}
}

// TestAccessLog: Envoy's http_grpc access logger delivers an entry per
// request carrying the dynamic metadata the service returned (under
// envoy.filters.http.ratelimit), the cost metadata and the logged response
// headers. The entries go to a test receiver until the service has an
// access-log sink.
func TestAccessLog(t *testing.T) {
	t.Parallel()
	envoytest.Scenario(t, "6 access-log service: entries carry our dynamic metadata and the logged headers")
	r, als := cost(t)
	c := envoytest.Client(t, "127.0.0.11")
	if resp := r.Do(t, c, http.MethodGet, "/v1/work?header=x-request-cost:77", "x-api-key", "key-log"); resp.Status != http.StatusOK {
		t.Fatalf("status %d, want 200", resp.Status)
	}
	if !testutil.Eventually(10*time.Second, func() bool { return len(als.Entries()) >= 1 }) {
		t.Fatal("no access-log entry arrived within 10s")
	}
	if got := als.LogName(); got != "dynalimit" {
		t.Errorf("log name = %q, want dynalimit", got)
	}
	e := als.Entries()[0]
	if got := e.GetRequest().GetPath(); got != "/v1/work?header=x-request-cost:77" {
		t.Errorf("entry path = %q", got)
	}
	if got := e.GetResponse().GetResponseCode().GetValue(); got != http.StatusOK {
		t.Errorf("entry response code = %d, want 200", got)
	}
	hdrs := e.GetResponse().GetResponseHeaders()
	if got := hdrs["x-request-cost"]; got != "77" {
		t.Errorf("logged x-request-cost = %q, want 77 (headers %v)", got, hdrs)
	}
	if got := hdrs["x-ratelimit-remaining"]; got != "10000" {
		t.Errorf("logged x-ratelimit-remaining = %q, want 10000", got)
	}
	md := e.GetCommonProperties().GetMetadata().GetFilterMetadata()
	rl := md["envoy.filters.http.ratelimit"].AsMap()
	if rl["domain"] != "cost" {
		t.Errorf("envoy.filters.http.ratelimit metadata = %v, want the request the service returned (domain cost)", rl)
	}
	descs, _ := rl["descriptors"].([]any)
	if len(descs) != 1 || fmt.Sprint(descs[0]) != "map[entries:[api_key=key-log] hitsAddend:0]" {
		t.Errorf("returned descriptors = %v, want one check of api_key=key-log", descs)
	}
	if got := md["dynalimit"].AsMap()["cost"]; got != float64(77) {
		t.Errorf("dynalimit.cost metadata = %v, want 77", got)
	}
}
