package e2e

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	cache "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/dynalimit/dynalimit/internal/envoytest"
	"github.com/dynalimit/dynalimit/internal/testutil"
	"github.com/dynalimit/dynalimit/internal/xdstest"
)

const (
	gatewayBootstrap = "examples/envoy/envoy-gateway-usage.yaml"
	// gatewayNode is the node id Envoy Gateway gives its rate-limit
	// deployment.
	gatewayNode = "envoy-ratelimit"
	// gatewayRoute and gatewayRule are the descriptors Envoy Gateway
	// generates for rule 0 of the route, applying to all traffic.
	gatewayRoute = "httproute/default/usage/rule/0/match/0/*"
	gatewayRule  = "rule-0-match--1"
)

// gatewayUsageConfig is the RateLimitConfig Envoy Gateway pushes for a
// usage-based limit of budget an hour (examples/envoy/config/usage.yaml as
// the xDS resource).
func gatewayUsageConfig(budget uint32) *rlsconf.RateLimitConfig {
	return &rlsconf.RateLimitConfig{
		Name:   "default/eg/http",
		Domain: "default/eg/http",
		Descriptors: []*rlsconf.RateLimitDescriptor{{
			Key: gatewayRoute, Value: gatewayRoute,
			Descriptors: []*rlsconf.RateLimitDescriptor{{
				Key: gatewayRule, Value: gatewayRule,
				RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_HOUR, RequestsPerUnit: budget},
			}},
		}},
	}
}

// TestGatewayUsageBasedLimit runs Envoy Gateway's own end-to-end sequence for
// usage-based limits through Envoy, with the route's rate limits as Envoy
// Gateway generates them (a request-time action with hits_addend 0, an
// apply_on_stream_done action whose hits_addend comes from dynamic metadata)
// and the descriptor rules pushed over xDS as Envoy Gateway pushes them (no
// extension of ours): a budget of 21 and a response cost of 10 go 21 → 11 →
// 1, the third charge lands although it overshoots, and the next request is
// refused. On the embedded store and on DynamoDB.
func TestGatewayUsageBasedLimit(t *testing.T) {
	t.Parallel()
	envoytest.Scenario(t, "8 Envoy Gateway's usage-based limit over xDS: 21 → 11 → 1, the overshooting charge lands, then 429 (memory, DynamoDB and Redis)")
	onStores(t, gatewayUsage)
}

// gatewayUsage runs the sequence against a fresh Envoy and service started
// with Envoy Gateway's xDS settings plus env.
func gatewayUsage(t *testing.T, env []string) {
	const budget, cost = 21, 10
	snap := cache.NewSnapshotCache(true, cache.IDHash{}, nil)
	xds := xdstest.Start(t, snap, "127.0.0.1:0", nil)
	r := envoytest.Start(t, envoytest.Options{
		Bootstrap: gatewayBootstrap,
		ConfigDir: configDir,
		Env: append([]string{
			"CONFIG_TYPE=GRPC_XDS_SOTW",
			"CONFIG_GRPC_XDS_SERVER_URL=" + xds.Addr(),
			"CONFIG_GRPC_XDS_NODE_ID=" + gatewayNode,
			"FORCE_START_WITHOUT_INITIAL_CONFIG=true",
		}, env...),
	})
	c := envoytest.Client(t, "127.0.0.20")

	// Before the first push every answer is OK, without a limit.
	if resp := r.Do(t, c, http.MethodGet, "/v1/chat"); resp.Status != http.StatusOK || resp.Header.Get("x-ratelimit-limit") != "" {
		t.Fatalf("before the push: status %d, x-ratelimit-limit %q; want 200 without a limit", resp.Status, resp.Header.Get("x-ratelimit-limit"))
	}
	xdstest.Push(t, snap, gatewayNode, "1", gatewayUsageConfig(budget))

	// remaining asks without a cost (a check, and no stream-end charge) and
	// returns what Envoy tells the client is left.
	remaining := func() (int, int) {
		resp := r.Do(t, c, http.MethodGet, "/v1/chat")
		if resp.Header.Get("x-ratelimit-remaining") == "" {
			return resp.Status, -1
		}
		return resp.Status, headerInt(t, resp, "x-ratelimit-remaining")
	}
	if !testutil.Eventually(10*time.Second, func() bool { _, n := remaining(); return n == budget }) {
		st, n := remaining()
		t.Fatalf("the pushed config did not apply within 10s: status %d, x-ratelimit-remaining %d, want %d (NACKs %v)", st, n, budget, xds.NACKs())
	}

	// Each request reports a cost of 10 that Envoy charges when its stream
	// is done; the request sees the budget as the charges before it left it.
	for i, want := range []int{21, 11, 1} {
		resp := r.Do(t, c, http.MethodGet, fmt.Sprintf("/v1/chat?header=x-request-cost:%d", cost))
		if resp.Status != http.StatusOK {
			t.Fatalf("request %d: status %d, want 200 (headers %v)", i+1, resp.Status, resp.Header)
		}
		if got := headerInt(t, resp, "x-ratelimit-remaining"); got != want {
			t.Errorf("request %d: x-ratelimit-remaining = %d, want %d", i+1, got, want)
		}
		after := want - cost
		if after < 0 {
			break
		}
		if !testutil.Eventually(10*time.Second, func() bool { _, n := remaining(); return n == after }) {
			_, n := remaining()
			t.Fatalf("after request %d: x-ratelimit-remaining = %d, want %d once its charge of %d landed", i+1, n, after, cost)
		}
	}
	// The third charge overshoots (1 left, 10 charged): it lands, and the
	// budget is refused until refill repays the debt (9 units at 21 an hour).
	if !testutil.Eventually(10*time.Second, func() bool { st, _ := remaining(); return st == http.StatusTooManyRequests }) {
		st, n := remaining()
		t.Fatalf("after the overshooting charge: status %d, x-ratelimit-remaining %d; want 429", st, n)
	}
	for range 3 {
		if st, n := remaining(); st != http.StatusTooManyRequests || n != 0 {
			t.Errorf("in debt: status %d, x-ratelimit-remaining %d; want 429 with 0", st, n)
		}
	}
	if got := r.App.Requests("/v1/chat"); got < 4 {
		t.Errorf("application saw %d requests, want the three charged ones and the checks before them", got)
	}
	if len(xds.NACKs()) != 0 {
		t.Errorf("the service NACKed Envoy Gateway's config: %v", xds.NACKs())
	}
}
