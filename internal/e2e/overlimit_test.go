package e2e

import (
	"net/http"
	"testing"

	"github.com/dynalimit/dynalimit/internal/envoytest"
)

// TestOverLimit: a client over its login limit (remote_address +
// generic_key, 5 a minute) gets 429 with x-envoy-ratelimited; Envoy's
// x-ratelimit-* headers agree with the service's decision and with the
// RateLimit-* headers the service adds; a client from another address is
// unaffected; refused requests never reach the application.
func TestOverLimit(t *testing.T) {
	t.Parallel()
	envoytest.Scenario(t, "1 over the limit: 429, x-ratelimit-* headers, another client unaffected")
	r := plain(t)
	alice, bob := envoytest.Client(t, "127.0.0.2"), envoytest.Client(t, "127.0.0.3")

	const limit = 5
	for i := 1; i <= limit; i++ {
		resp := r.Do(t, alice, http.MethodPost, "/login")
		if resp.Status != http.StatusOK {
			t.Fatalf("login %d from alice: status %d, want 200 (headers %v)", i, resp.Status, resp.Header)
		}
		checkHeaders(t, resp, limit, limit-i)
		// 5 a minute refills one token every 12 s: the bucket is full again
		// 12 s per token taken.
		if got, want := headerInt(t, resp, "x-ratelimit-reset"), 12*i; got < want-2 || got > want {
			t.Errorf("login %d: x-ratelimit-reset = %d, want %d (−1 for Envoy's truncation)", i, got, want)
		}
	}
	resp := r.Do(t, alice, http.MethodPost, "/login")
	if resp.Status != http.StatusTooManyRequests {
		t.Fatalf("login %d from alice: status %d, want 429", limit+1, resp.Status)
	}
	if got := resp.Header.Get("x-envoy-ratelimited"); got != "true" {
		t.Errorf("429: x-envoy-ratelimited = %q, want true", got)
	}
	if got := headerInt(t, resp, "x-ratelimit-remaining"); got != 0 {
		t.Errorf("429: x-ratelimit-remaining = %d, want 0", got)
	}
	// duration_until_reset is the time until the bucket is full again.
	if got := headerInt(t, resp, "x-ratelimit-reset"); got < 57 || got > 60 {
		t.Errorf("429: x-ratelimit-reset = %d, want about 60 (time until the bucket is full)", got)
	}
	if got := headerInt(t, resp, "RateLimit-Remaining"); got != 0 {
		t.Errorf("429: RateLimit-Remaining = %d, want 0", got)
	}
	if got := r.App.Requests("/login"); got != limit {
		t.Errorf("application saw %d logins, want %d (a refused request must not reach it)", got, limit)
	}

	// Another client address has a bucket of its own.
	resp = r.Do(t, bob, http.MethodPost, "/login")
	if resp.Status != http.StatusOK {
		t.Fatalf("login from bob: status %d, want 200", resp.Status)
	}
	checkHeaders(t, resp, limit, limit-1)

	// Envoy's counters beside ours: 6 decisions admitted, 1 refused.
	if got, want := r.Envoy.RateLimitStats(t, appCluster), (envoytest.FilterStats{OK: limit + 1, OverLimit: 1}); got != want {
		t.Errorf("envoy %s, want %s", got, want)
	}
	m := r.Service.Metrics(t)
	if got := m[`ratelimit_decisions_total{code="OK",domain="edge"}`]; got != limit+1 {
		t.Errorf("ratelimit_decisions_total OK = %v, want %d", got, limit+1)
	}
	if got := m[`ratelimit_decisions_total{code="OVER_LIMIT",domain="edge"}`]; got != 1 {
		t.Errorf("ratelimit_decisions_total OVER_LIMIT = %v, want 1", got)
	}
}

// checkHeaders checks an admitted response's rate-limit headers: Envoy's
// x-ratelimit-* (DRAFT_VERSION_03, from the most restrictive descriptor
// status) and the service's RateLimit-*, which must say the same.
func checkHeaders(t *testing.T, resp envoytest.Response, limit, remaining int) {
	t.Helper()
	// "5, 5;w=60, 6000;w=60": the most restrictive limit, then every limit
	// of the request with its window.
	if got, want := resp.Header.Get("x-ratelimit-limit"), "5, 5;w=60, 6000;w=60"; got != want {
		t.Errorf("x-ratelimit-limit = %q, want %q", got, want)
	}
	if got := headerInt(t, resp, "x-ratelimit-remaining"); got != remaining {
		t.Errorf("x-ratelimit-remaining = %d, want %d", got, remaining)
	}
	if got := headerInt(t, resp, "RateLimit-Limit"); got != limit {
		t.Errorf("RateLimit-Limit = %d, want %d", got, limit)
	}
	if got := headerInt(t, resp, "RateLimit-Remaining"); got != remaining {
		t.Errorf("RateLimit-Remaining = %d, want %d", got, remaining)
	}
	// Envoy truncates duration_until_reset to whole seconds; the service
	// rounds it up.
	if envoy, ours := headerInt(t, resp, "x-ratelimit-reset"), headerInt(t, resp, "RateLimit-Reset"); envoy != ours && envoy != ours-1 {
		t.Errorf("x-ratelimit-reset = %d, RateLimit-Reset = %d: they disagree", envoy, ours)
	}
}
