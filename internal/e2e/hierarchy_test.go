package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/dynalimit/dynalimit/internal/envoytest"
)

// hierarchyBootstrap sends (tenant, project, api_key) from request headers
// to the rules of examples/envoy/config/hierarchy.yaml: a tenant 5 a
// minute, a key 3 (key-batch 2), each key charging its project and tenant.
const hierarchyBootstrap = "examples/envoy/envoy-hierarchy.yaml"

// TestHierarchy runs the hierarchy example through Envoy, on the embedded
// store and on DynamoDB: two API keys under one tenant share the tenant's 5
// a minute, so the sixth request is refused by the tenant while its key
// still has a token, and the 429 names the tenant's limit; a key with its
// own tighter limit (key-batch, 2) is refused by it first, and the refused
// request takes nothing from the tenant, which admits exactly its 3
// remaining requests from other keys.
func TestHierarchy(t *testing.T) {
	t.Parallel()
	envoytest.Scenario(t, "9 hierarchical limits: two keys share their tenant's 5, a key's own tighter limit refuses first (memory, DynamoDB and Redis)")
	onStores(t, hierarchy)
}

// hierarchy runs the sequence against a fresh Envoy and service started
// with the service's RateLimit-* headers on, plus env.
func hierarchy(t *testing.T, env []string) {
	r := envoytest.Start(t, envoytest.Options{
		Bootstrap: hierarchyBootstrap,
		ConfigDir: configDir,
		Env:       append([]string{"LIMIT_RESPONSE_HEADERS_ENABLED=true"}, env...),
	})
	c := envoytest.Client(t, "127.0.0.30")
	do := func(tenant, key string) envoytest.Response {
		t.Helper()
		return r.Do(t, c, http.MethodGet, "/v1/items", "x-tenant", tenant, "x-project", "web", "x-api-key", key)
	}
	const tenantLimit, keyLimit, batchLimit = 5, 3, 2

	// Two keys under tenant acme, alternating: the tenant's 5 run out at
	// the fifth request, when key-1 has taken its 3 and key-2 only 2.
	keys := []string{"key-1", "key-2"}
	for i := 1; i <= tenantLimit; i++ {
		if resp := do("acme", keys[(i-1)%2]); resp.Status != http.StatusOK {
			t.Fatalf("request %d (%s): status %d, want 200 (headers %v)", i, keys[(i-1)%2], resp.Status, resp.Header)
		}
	}
	resp := do("acme", "key-2")
	if resp.Status != http.StatusTooManyRequests {
		t.Fatalf("request %d (key-2, 1 of its %d left): status %d, want 429 from the tenant's %d (headers %v)",
			tenantLimit+1, keyLimit, resp.Status, tenantLimit, resp.Header)
	}
	checkRefusal(t, resp, tenantLimit)

	// key-batch under tenant globex: its own 2 refuse the third request
	// while the tenant has 3 tokens left.
	for i := 1; i <= batchLimit; i++ {
		if resp := do("globex", "key-batch"); resp.Status != http.StatusOK {
			t.Fatalf("key-batch request %d: status %d, want 200 (headers %v)", i, resp.Status, resp.Header)
		}
	}
	resp = do("globex", "key-batch")
	if resp.Status != http.StatusTooManyRequests {
		t.Fatalf("key-batch request %d: status %d, want 429 from its own %d (headers %v)", batchLimit+1, resp.Status, batchLimit, resp.Header)
	}
	checkRefusal(t, resp, batchLimit)

	// The refused request took nothing from globex: other keys get exactly
	// its 3 remaining tokens, then the tenant refuses.
	left := tenantLimit - batchLimit
	for i := 1; i <= left; i++ {
		key := fmt.Sprintf("key-g%d", i)
		if resp := do("globex", key); resp.Status != http.StatusOK {
			t.Fatalf("globex %s: status %d, want 200 (the tenant had %d tokens left; headers %v)", key, resp.Status, left, resp.Header)
		}
	}
	resp = do("globex", "key-g9")
	if resp.Status != http.StatusTooManyRequests {
		t.Fatalf("globex key-g9: status %d, want 429 once the tenant's %d are spent (headers %v)", resp.Status, tenantLimit, resp.Header)
	}
	checkRefusal(t, resp, tenantLimit)

	admitted, refused := tenantLimit+batchLimit+left, 3
	if got := r.App.Requests("/v1/items"); got != admitted {
		t.Errorf("application saw %d requests, want the %d admitted (a refused request must not reach it)", got, admitted)
	}
	if got, want := r.Envoy.RateLimitStats(t, appCluster), (envoytest.FilterStats{OK: uint64(admitted), OverLimit: uint64(refused)}); got != want {
		t.Errorf("envoy %s, want %s", got, want)
	}
	// Levels: 0 the key, 1 the project, 2 the tenant.
	m := r.Service.Metrics(t)
	if got := m[`ratelimit_hierarchy_refusals_total{depth="2"}`]; got != 2 {
		t.Errorf("refusals by the tenant (depth 2) = %v, want 2", got)
	}
	if got := m[`ratelimit_hierarchy_refusals_total{depth="0"}`]; got != 1 {
		t.Errorf("refusals by the key (depth 0) = %v, want 1", got)
	}
}

// checkRefusal checks a 429's rate-limit headers: Envoy's and the service's
// name the limit of the level that refused, with nothing left.
func checkRefusal(t *testing.T, resp envoytest.Response, limit int) {
	t.Helper()
	if got := resp.Header.Get("x-envoy-ratelimited"); got != "true" {
		t.Errorf("429: x-envoy-ratelimited = %q, want true", got)
	}
	// "5, 5;w=60": the refusing level's limit, then the descriptor's
	// status with its window.
	want := fmt.Sprintf("%d, %d;w=60", limit, limit)
	switch got := resp.Header.Get("x-ratelimit-limit"); {
	case !strings.HasPrefix(got, fmt.Sprintf("%d,", limit)):
		t.Errorf("429: x-ratelimit-limit = %q, want the refusing level's limit %d first", got, limit)
	case got != want:
		t.Errorf("429: x-ratelimit-limit = %q, want %q", got, want)
	}
	if got := headerInt(t, resp, "x-ratelimit-remaining"); got != 0 {
		t.Errorf("429: x-ratelimit-remaining = %d, want 0", got)
	}
	if got := headerInt(t, resp, "RateLimit-Limit"); got != limit {
		t.Errorf("429: RateLimit-Limit = %d, want %d", got, limit)
	}
}
