package e2e

import (
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/internal/envoytest"
)

// TestSeveralDescriptors: a search request carries four descriptors
// (remote_address, api_key, api_key + route_class from the route's
// metadata, and client_class for bots). When the expensive-route limit
// refuses it, nothing is debited: the API key's own bucket shows only the
// admitted requests. A shadow-mode rule lets every bot request through and
// counts the ones over its limit.
func TestSeveralDescriptors(t *testing.T) {
	t.Parallel()
	envoytest.Scenario(t, "2 several descriptors: all-or-nothing, shadow mode counted")
	r := plain(t)
	c := envoytest.Client(t, "127.0.0.4")
	start := time.Now()

	const expensive, refused = 5, 10
	for i := 1; i <= expensive+refused; i++ {
		resp := r.Do(t, c, http.MethodGet, "/api/search?q=x", "x-api-key", "key-a")
		want := http.StatusOK
		if i > expensive {
			want = http.StatusTooManyRequests
		}
		if resp.Status != want {
			t.Fatalf("search %d: status %d, want %d (headers %v)", i, resp.Status, want, resp.Header)
		}
	}
	if got := r.App.Requests("/api/search"); got != expensive {
		t.Errorf("application saw %d searches, want %d", got, expensive)
	}

	// The API key's bucket (1,000 an hour) lost one token per admitted
	// search and none per refused one; this request takes one more. Its
	// headers show that bucket: it is the most restrictive of the request.
	resp := r.Do(t, c, http.MethodGet, "/api/items", "x-api-key", "key-a")
	if resp.Status != http.StatusOK {
		t.Fatalf("items: status %d, want 200", resp.Status)
	}
	want := 1000 - expensive - 1
	refill := int(math.Ceil(time.Since(start).Hours() * 1000)) // tokens refilled meanwhile, at most
	got := headerInt(t, resp, "x-ratelimit-remaining")
	switch {
	case got < want:
		t.Errorf("API key remaining = %d, want %d: %d tokens were taken by refused requests", got, want, want-got)
	case got > want+refill:
		t.Errorf("API key remaining = %d, want %d (+%d refilled)", got, want, refill)
	}
	if got := resp.Header.Get("x-ratelimit-limit"); got != "1000, 1000;w=3600, 6000;w=60" {
		t.Errorf("items: x-ratelimit-limit = %q, want the API key's limit first", got)
	}

	// Another API key from the same address is not affected.
	if resp := r.Do(t, c, http.MethodGet, "/api/search?q=x", "x-api-key", "key-b"); resp.Status != http.StatusOK {
		t.Errorf("search with another key: status %d, want 200", resp.Status)
	}

	// Shadow mode: 15 bot requests against 10 a minute all pass, and the
	// service counts the 5 over the limit.
	bot := envoytest.Client(t, "127.0.0.5")
	for i := 1; i <= 15; i++ {
		resp := r.Do(t, bot, http.MethodGet, "/", "user-agent", "ExampleBot/1.0")
		if resp.Status != http.StatusOK {
			t.Fatalf("bot request %d: status %d, want 200 (shadow mode never refuses)", i, resp.Status)
		}
	}

	m := r.Service.Metrics(t)
	if got := m[`ratelimit_rule_shadow_mode_hits_total{key="edge.client_class_bot"}`]; got != 5 {
		t.Errorf("shadow-mode hits of client_class_bot = %v, want 5", got)
	}
	if got := m[`ratelimit_decisions_total{code="OVER_LIMIT",domain="edge"}`]; got != refused {
		t.Errorf("ratelimit_decisions_total OVER_LIMIT = %v, want %d", got, refused)
	}
	wantEnvoy := envoytest.FilterStats{OK: expensive + 1 + 1 + 15, OverLimit: refused}
	if got := r.Envoy.RateLimitStats(t, appCluster); got != wantEnvoy {
		t.Errorf("envoy %s, want %s", got, wantEnvoy)
	}
}
