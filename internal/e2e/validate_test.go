package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dynalimit/dynalimit/internal/envoytest"
	"github.com/dynalimit/dynalimit/internal/testutil"
)

// exampleCerts are the certificate paths the TLS example names; validation
// replaces them with files that exist.
func exampleCerts(p testutil.PKI) map[string]string {
	return map[string]string{
		"/etc/dynalimit/tls/ca.pem":        p.CAFile,
		"/etc/dynalimit/tls/envoy.pem":     p.ClientCert,
		"/etc/dynalimit/tls/envoy-key.pem": p.ClientKey,
	}
}

// TestExamplesValidate runs `envoy --mode validate` on every bootstrap in
// examples/envoy (certificate paths pointed at test files, nothing else
// changed), and checks that validation does catch a broken one.
func TestExamplesValidate(t *testing.T) {
	root := testutil.RepoRoot(t)
	files, err := filepath.Glob(filepath.Join(root, "examples", "envoy", "*.yaml"))
	if err != nil || len(files) < 2 {
		t.Fatalf("bootstraps in examples/envoy: %v (%v), want the plain and the mTLS one at least", files, err)
	}
	pki := testutil.NewPKI(t)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			cfg, err := envoytest.Render(f, envoytest.Substitutions{Strings: exampleCerts(pki)})
			if err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(t.TempDir(), filepath.Base(f))
			if err := os.WriteFile(out, cfg, 0o644); err != nil {
				t.Fatal(err)
			}
			envoytest.Validate(t, out)
		})
	}
	t.Run("rate-limit filter after the router is rejected", func(t *testing.T) {
		cfg, err := envoytest.Render(filepath.Join(root, plainBootstrap), envoytest.Substitutions{
			Edits: []envoytest.Edit{envoytest.MoveFilterLast("envoy.filters.http.ratelimit")},
		})
		if err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(t.TempDir(), "broken.yaml")
		if err := os.WriteFile(out, cfg, 0o644); err != nil {
			t.Fatal(err)
		}
		err = envoytest.ValidateErr(t, out)
		if err == nil || !strings.Contains(err.Error(), "router") {
			t.Errorf("validate with the filter after the router = %v, want a rejection naming the router", err)
		}
	})
}
