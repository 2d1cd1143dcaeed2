package main

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cache "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/dynalimit/dynalimit/internal/config"
	"github.com/dynalimit/dynalimit/internal/metrics"
	"github.com/dynalimit/dynalimit/internal/testutil"
	"github.com/dynalimit/dynalimit/internal/xdstest"
)

// adjustedRules are rules with adjustments, in one file.
const adjustedRules = `domain: llm
adjustments:
  - limit: tpm
    cost: {header: x-llm-tokens}
descriptors:
  - key: api_key
    limits:
      - {name: tpm, unit: minute, requests_per_unit: 1000}
`

// TestCheckConfigAdjustments: check-config counts the adjustments of a
// directory and reports every problem of theirs with file, line and key.
func TestCheckConfigAdjustments(t *testing.T) {
	good := t.TempDir()
	writeConfig(t, good, "llm.yaml", adjustedRules)
	split := t.TempDir()
	writeConfig(t, split, "rules.yaml", adjustedRules[strings.Index(adjustedRules, "descriptors:"):]+"domain: llm\n")
	writeConfig(t, split, "adjust.yaml", adjustedRules[:strings.Index(adjustedRules, "descriptors:")])
	bad := t.TempDir()
	writeConfig(t, bad, "llm.yaml", `domain: llm
adjustments:
  - limit: tmp
    cost: {header: x-llm-tokens}
  - limit: tpm
    cost: {header: "x llm"}
  - limit: tpm
    cots: {trailer: x-llm-tokens}
descriptors:
  - key: api_key
    limits:
      - {name: tpm, unit: minute, requests_per_unit: 1000}
`)
	for _, tt := range []struct {
		name, dir string
		code      int
		contains  []string
	}{
		{"adjusted", good, 0, []string{good + ": 1 domains, 1 rules, 1 adjustment: OK\n"}},
		{"adjustments in a file of their own", split, 0, []string{split + ": 1 domains, 1 rules, 1 adjustment: OK\n"}},
		{"bad adjustments", bad, 1, []string{
			"llm.yaml:6: header: invalid header name \"x llm\": want an HTTP field name",
			"llm.yaml:8: cots: config error, unknown key 'cots' in an adjustment; did you mean 'cost'?",
			"llm.yaml:7: cost: an adjustment needs cost:",
			"llm.yaml:3: limit: limit 'tmp' is not a named limit of domain 'llm' (did you mean 'tpm'?); its named limits: tpm",
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, out := runCheckConfig(t, nil, "-config_dir", tt.dir)
			if code != tt.code {
				t.Errorf("check-config %s = exit %d, want %d\n%s", tt.dir, code, tt.code, out)
			}
			for _, want := range tt.contains {
				if !strings.Contains(out, want) {
					t.Errorf("check-config %s output lacks %q:\n%s", tt.dir, want, out)
				}
			}
		})
	}
}

// TestCheckConfigAdjustmentsOverXDS: over xDS the directory holds
// adjustments only; their limits are checked when the rules arrive, and
// no directory at the default place is no adjustments.
func TestCheckConfigAdjustmentsOverXDS(t *testing.T) {
	xds := map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": "127.0.0.1:1"}
	good := t.TempDir()
	writeConfig(t, good, "adjust.yaml", egAdjustments)
	rules := t.TempDir()
	writeConfig(t, rules, "llm.yaml", adjustedRules)
	root := t.TempDir() // RUNTIME_ROOT without the config directory under it
	for _, tt := range []struct {
		name     string
		env      map[string]string
		args     []string
		code     int
		contains string
	}{
		{"adjustments", xds, []string{"-config_dir", good}, 0, good + ": 1 adjustment for rules pushed over xDS: OK (the limits they name are checked when the rules arrive)\n"},
		{"rules in the directory", xds, []string{"-config_dir", rules}, 0, "warning: " + filepath.Join(rules, "llm.yaml") + ":1: descriptors: the rules arrive over xDS: this file's descriptors are ignored, its adjustments kept"},
		{"no directory", map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": "127.0.0.1:1", "RUNTIME_ROOT": root}, nil, 0,
			"no adjustments directory; the rules come over xDS: OK\n"},
		{"CONFIG_DIR missing", xds, []string{"-config_dir", filepath.Join(root, "absent")}, 1, "does not load"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, out := runCheckConfig(t, tt.env, tt.args...)
			if code != tt.code || !strings.Contains(out, tt.contains) {
				t.Errorf("check-config %v = exit %d\n%s\nwant exit %d and %q", tt.args, code, out, tt.code, tt.contains)
			}
		})
	}
}

func runCheckConfig(t *testing.T, env map[string]string, args ...string) (int, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Main(context.Background(), append([]string{"check-config"}, args...), func(k string) string { return env[k] }, &out, &errOut)
	return code, out.String() + errOut.String()
}

// egAdjustments select the unnamed limit of an Envoy Gateway rule.
const egAdjustments = `domain: default/eg/http
adjustments:
  - limit: tokens
    descriptor:
      - {key: httproute/default/usage/rule/0/match/0/*, value: httproute/default/usage/rule/0/match/0/*}
      - {key: rule-0-match--1, value: rule-0-match--1}
    cost: {metadata: {namespace: io.envoy.ai_gateway, key: llm_total_token}}
`

// egRules are the rules Envoy Gateway pushes for egAdjustments' route.
func egRules() *rlsconf.RateLimitConfig {
	const route = "httproute/default/usage/rule/0/match/0/*"
	return &rlsconf.RateLimitConfig{Name: "default/eg/http", Domain: "default/eg/http",
		Descriptors: []*rlsconf.RateLimitDescriptor{{Key: route, Value: route, Descriptors: []*rlsconf.RateLimitDescriptor{{
			Key: "rule-0-match--1", Value: "rule-0-match--1",
			RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_HOUR, RequestsPerUnit: 21},
		}}}}}
}

// TestXDSAdjustmentsReloadConfig: over xDS the adjustments directory is
// merged with the pushed rules, reloaded on SIGHUP (Trigger); a bad
// adjustments block keeps the adjustments that serve, and
// ratelimit_config_last_reload_successful stays 0 through a later push
// until a fixed one replaces them.
func TestXDSAdjustmentsReloadConfig(t *testing.T) {
	snap := cache.NewSnapshotCache(true, cache.IDHash{}, nil)
	srv := xdstest.Start(t, snap, "127.0.0.1:0", nil)
	defer srv.Stop()
	xdstest.Push(t, snap, "default", "1", egRules())

	dir := t.TempDir()
	writeConfig(t, dir, "adjust.yaml", egAdjustments)
	s := config.Defaults()
	s.ConfigType = config.ConfigTypeXDS
	s.XDSServerURL = srv.Addr()
	s.ConfigDirOverride = dir
	log := logrus.New()
	log.SetOutput(io.Discard)
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	src, err := openXDS(s, m, logrus.NewEntry(log))
	if err != nil {
		t.Fatalf("openXDS = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	}()
	if err := src.Ready(ctx); err != nil {
		t.Fatalf("Ready = %v", err)
	}

	cost := func() string {
		cfg := src.Current()
		if cfg == nil || len(cfg.Rules()) == 0 {
			return ""
		}
		a, ok := cfg.AdjustmentFor(cfg.Rules()[0], "default")
		if !ok {
			return ""
		}
		return a.Cost.String()
	}
	const total = "metadata io.envoy.ai_gateway/llm_total_token"
	if got := cost(); got != total {
		t.Fatalf("adjustment at start = %q, want %q", got, total)
	}

	writeConfig(t, dir, "adjust.yaml", strings.Replace(egAdjustments, "cost:", "cots:", 1))
	src.Trigger()
	waitUntil(t, "the failed reload", func() bool { return reloadSucceeded(t, reg) == 0 })
	if got := cost(); got != total {
		t.Errorf("after a bad adjustments block: %q, want the old %q serving", got, total)
	}
	if dump := configDump(src, s.Namespace)(); !strings.Contains(dump, "default/eg/http adjustment tokens:") {
		t.Errorf("/rlconfig lacks the adjustment:\n%s", dump)
	}
	// A push that lands while the adjustments are bad does not clear the
	// failure: the gauge is 1 only while both sources' last attempts
	// succeeded.
	pushes := testutil.CounterValue(t, reg, "ratelimit_config_reloads_total", map[string]string{"result": "success"})
	xdstest.Push(t, snap, "default", "2", egRules())
	waitUntil(t, "the second push", func() bool {
		return testutil.CounterValue(t, reg, "ratelimit_config_reloads_total", map[string]string{"result": "success"}) > pushes
	})
	if got := reloadSucceeded(t, reg); got != 0 {
		t.Errorf("last reload successful = %v after a push with the adjustments still bad, want 0", got)
	}

	writeConfig(t, dir, "adjust.yaml", strings.Replace(egAdjustments, "llm_total_token", "llm_output_token", 1))
	src.Trigger()
	waitUntil(t, "the fixed adjustments", func() bool { return cost() == "metadata io.envoy.ai_gateway/llm_output_token" })
	if got := reloadSucceeded(t, reg); got != 1 {
		t.Errorf("last reload successful = %v after the fix, want 1", got)
	}
}

// TestReloadSourcesGauge: over xDS the last-reload gauge is 1 only while
// the last attempt of both sources (pushes, adjustments) succeeded, in
// either order; every attempt is counted.
func TestReloadSourcesGauge(t *testing.T) {
	type step struct {
		source int
		ok     bool
		gauge  float64
	}
	for _, tt := range []struct {
		name  string
		steps []step
	}{
		{"both good", []step{{sourceAdjustments, true, 1}, {sourceXDS, true, 1}}},
		{"bad adjustments, then a push", []step{{sourceXDS, true, 1}, {sourceAdjustments, false, 0}, {sourceXDS, true, 0}, {sourceAdjustments, true, 1}}},
		{"a NACKed push, then adjustments", []step{{sourceXDS, false, 0}, {sourceAdjustments, true, 0}, {sourceXDS, true, 1}}},
		{"both bad, one fixed", []step{{sourceXDS, false, 0}, {sourceAdjustments, false, 0}, {sourceXDS, true, 0}, {sourceAdjustments, true, 1}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			r := &reloadSources{m: metrics.New(reg)}
			var failures float64
			for i, st := range tt.steps {
				r.observe(st.source, st.ok, time.Now())
				if !st.ok {
					failures++
				}
				if got := reloadSucceeded(t, reg); got != st.gauge {
					t.Errorf("step %d: last reload successful = %v, want %v", i, got, st.gauge)
				}
			}
			if got := testutil.CounterValue(t, reg, "ratelimit_config_reloads_total", map[string]string{"result": "failure"}); got != failures {
				t.Errorf("failures counted = %v, want %v", got, failures)
			}
		})
	}
}

// waitUntil waits up to 10 s for cond.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// reloadSucceeded reads ratelimit_config_last_reload_successful.
func reloadSucceeded(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	return testutil.CounterValue(t, reg, "ratelimit_config_last_reload_successful", nil)
}

// TestFileAdjustmentsReloadConfig: from files, a reload whose adjustments
// block is bad (a limit the rules lack) fails as a whole, and the rules and
// adjustments that serve keep serving.
func TestFileAdjustmentsReloadConfig(t *testing.T) {
	dir := t.TempDir()
	writeConfig(t, dir, "llm.yaml", adjustedRules)
	s := config.Defaults()
	s.ConfigDirOverride = dir
	log := logrus.New()
	log.SetOutput(io.Discard)
	r, err := config.NewReloader(config.ReloaderOptions{Dir: s.ConfigDir(), Load: s.Loader(), Logger: logrus.NewEntry(log)})
	if err != nil {
		t.Fatal(err)
	}
	header := func() string {
		cfg := r.Current()
		a, ok := cfg.AdjustmentFor(cfg.Rules()[0], "tpm")
		if !ok {
			return ""
		}
		return a.Cost.Header
	}
	if got := header(); got != "x-llm-tokens" {
		t.Fatalf("adjustment at start = %q, want x-llm-tokens", got)
	}
	writeConfig(t, dir, "llm.yaml", strings.Replace(strings.Replace(adjustedRules, "limit: tpm", "limit: tpd", 1), "x-llm-tokens", "x-other", 1))
	if err := r.Reload(); err == nil || !strings.Contains(err.Error(), "llm.yaml:3: limit: limit 'tpd' is not a named limit of domain 'llm'") {
		t.Errorf("Reload() = %v, want the unknown limit with file and line", err)
	}
	if got := header(); got != "x-llm-tokens" {
		t.Errorf("after a bad reload: %q, want the old x-llm-tokens serving", got)
	}
	writeConfig(t, dir, "llm.yaml", strings.Replace(adjustedRules, "x-llm-tokens", "x-other", 1))
	if err := r.Reload(); err != nil {
		t.Fatalf("Reload() = %v", err)
	}
	if got := header(); got != "x-other" {
		t.Errorf("after a good reload: %q, want x-other", got)
	}
}

// TestLeaseKeyWarningOnlyWithAdjustments: without a lease key, the
// warning comes only when a domain uses adjustments (the quick start's
// configuration uses none).
func TestLeaseKeyWarningOnlyWithAdjustments(t *testing.T) {
	for _, adjusted := range []bool{false, true} {
		log, hook := logtest.NewNullLogger()
		if _, _, err := leaseKeys(config.Defaults(), adjusted, logrus.NewEntry(log)); err != nil {
			t.Fatal(err)
		}
		warned := false
		for _, e := range hook.AllEntries() {
			warned = warned || strings.Contains(e.Message, "no LEASE_SIGNING_KEY")
		}
		if warned != adjusted {
			t.Errorf("leaseKeys(no key, adjusted %t) warned %t, want %t", adjusted, warned, adjusted)
		}
	}
}
