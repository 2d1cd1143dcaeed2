package e2e

import (
	"strconv"
	"testing"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/internal/envoytest"
	"github.com/dynalimit/dynalimit/internal/redistest"
)

// The example under test and the descriptor rules it needs.
const (
	plainBootstrap = "examples/envoy/envoy.yaml"
	mtlsBootstrap  = "examples/envoy/envoy-mtls.yaml"
	configDir      = "examples/envoy/config"
	// appCluster is the route target of the examples: Envoy counts the
	// rate-limit filter's decisions under cluster.app.ratelimit.*.
	appCluster = "app"
)

// plain starts the plain example with the service's RateLimit-* headers on,
// plus env.
func plain(t *testing.T, env ...string) *envoytest.Rig {
	t.Helper()
	return envoytest.Start(t, envoytest.Options{
		Bootstrap: plainBootstrap,
		ConfigDir: configDir,
		Env:       append([]string{"LIMIT_RESPONSE_HEADERS_ENABLED=true"}, env...),
	})
}

// headerInt returns the header as an integer, failing t when it is missing
// or not a number.
func headerInt(t *testing.T, resp envoytest.Response, name string) int {
	t.Helper()
	v := resp.Header.Get(name)
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("header %s = %q, want a number (status %d, headers %v)", name, v, resp.Status, resp.Header)
	}
	return n
}

// metric returns one series of the service's metrics (0 when absent).
func metric(t *testing.T, r *envoytest.Rig, series string) float64 {
	t.Helper()
	return r.Service.Metrics(t)[series]
}

// onStores runs a scenario on the embedded store (env nil), then on a
// fresh table of the package's DynamoDB Local, created with the binary's
// `table create`, with BACKEND_TIMEOUT=400ms (DynamoDB Local's latency),
// then on a redis-server of the scenario's own (it starts in tens of
// milliseconds).
func onStores(t *testing.T, run func(t *testing.T, env []string)) {
	t.Run("memory", func(t *testing.T) { run(t, nil) })
	t.Run("dynamodb", func(t *testing.T) {
		env := envoytest.DynamoDBTable(t, dynamotest.Shared(t))
		run(t, append(env, "BACKEND_TIMEOUT=400ms"))
	})
	t.Run("redis", func(t *testing.T) {
		run(t, []string{"BACKEND_TYPE=redis", "REDIS_URL=" + redistest.Start(t, redistest.Options{}).Addr(), "BACKEND_TIMEOUT=100ms"})
	})
}
