package e2e

import (
	"net/http"
	"testing"

	"github.com/dynalimit/dynalimit/internal/envoytest"
	"github.com/dynalimit/dynalimit/internal/testutil"
)

// TestMutualTLS runs examples/envoy/envoy-mtls.yaml: Envoy reaches the
// service over TLS with its client certificate and limits are enforced; with
// a client certificate from another CA the service refuses the handshake and
// Envoy applies the example's failure mode (deny: 500).
func TestMutualTLS(t *testing.T) {
	t.Parallel()
	envoytest.Scenario(t, "7 mTLS from Envoy to the service; a wrong client certificate is refused")
	pki := testutil.NewPKI(t)
	env := []string{
		"LIMIT_RESPONSE_HEADERS_ENABLED=true",
		"GRPC_SERVER_USE_TLS=true",
		"GRPC_SERVER_TLS_CERT=" + pki.ServerCert,
		"GRPC_SERVER_TLS_KEY=" + pki.ServerKey,
		"GRPC_CLIENT_TLS_CACERT=" + pki.CAFile,
		"GRPC_CLIENT_TLS_SAN=" + testutil.ClientSAN,
	}

	t.Run("right certificate", func(t *testing.T) {
		r := envoytest.Start(t, envoytest.Options{Bootstrap: mtlsBootstrap, ConfigDir: configDir, Env: env, Strings: exampleCerts(pki)})
		c := envoytest.Client(t, "127.0.0.9")
		for i := 1; i <= 6; i++ {
			want := http.StatusOK
			if i == 6 {
				want = http.StatusTooManyRequests
			}
			resp := r.Do(t, c, http.MethodPost, "/login")
			if resp.Status != want {
				t.Fatalf("login %d: status %d, want %d", i, resp.Status, want)
			}
			if i < 6 {
				checkHeaders(t, resp, 5, 5-i)
			}
		}
		if got, want := r.Envoy.RateLimitStats(t, appCluster), (envoytest.FilterStats{OK: 5, OverLimit: 1}); got != want {
			t.Errorf("envoy %s, want %s", got, want)
		}
		if got := r.Envoy.Stat(t, "cluster.ratelimit.ssl.handshake"); got < 1 {
			t.Errorf("cluster.ratelimit.ssl.handshake = %d, want at least 1 (the service is reached over TLS)", got)
		}
	})

	t.Run("certificate from another CA", func(t *testing.T) {
		certs := exampleCerts(pki)
		certs["/etc/dynalimit/tls/envoy.pem"], certs["/etc/dynalimit/tls/envoy-key.pem"] = pki.RogueCert, pki.RogueKey
		r := envoytest.Start(t, envoytest.Options{Bootstrap: mtlsBootstrap, ConfigDir: configDir, Env: env, Strings: certs})
		c := envoytest.Client(t, "127.0.0.9")
		const n = 3
		for i := 1; i <= n; i++ {
			if resp := r.Do(t, c, http.MethodGet, "/"); resp.Status != http.StatusInternalServerError {
				t.Errorf("request %d: status %d, want 500 (failure_mode_deny: true)", i, resp.Status)
			}
		}
		if got, want := r.Envoy.RateLimitStats(t, appCluster), (envoytest.FilterStats{Error: n}); got != want {
			t.Errorf("envoy %s, want %s", got, want)
		}
		if got := r.App.Requests("/"); got != 0 {
			t.Errorf("application saw %d requests, want 0", got)
		}
		m := r.Service.Metrics(t)
		for _, code := range []string{"OK", "OVER_LIMIT"} {
			if got := m[`ratelimit_decisions_total{code="`+code+`",domain="edge"}`]; got != 0 {
				t.Errorf("the service decided %v requests %s over a refused handshake, want 0", got, code)
			}
		}
	})
}
