package xdsconfig_test

import (
	"testing"

	cache "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/dynalimit/dynalimit/internal/xdsconfig"
	"github.com/dynalimit/dynalimit/internal/xdstest"
	"github.com/dynalimit/dynalimit/pkg/descriptors"
)

// egConf is a domain as Envoy Gateway pushes it: the route's descriptor,
// then one unnamed limit per rule of its policy (the number of rules is
// rulesN).
func egConf(rulesN int) *rlsconf.RateLimitConfig {
	const route = "httproute/default/usage/rule/0/match/0/*"
	var inner []*rlsconf.RateLimitDescriptor
	for i := range rulesN {
		key := []string{"rule-0-match--1", "rule-1-match--1"}[i]
		inner = append(inner, &rlsconf.RateLimitDescriptor{Key: key, Value: key,
			RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_HOUR, RequestsPerUnit: 21}})
	}
	return &rlsconf.RateLimitConfig{Name: "default/eg/http", Domain: "default/eg/http",
		Descriptors: []*rlsconf.RateLimitDescriptor{{Key: route, Value: route, Descriptors: inner}}}
}

// egAdjustments select the limit of the policy's second rule.
const egAdjustments = `domain: default/eg/http
adjustments:
  - limit: tokens
    descriptor:
      - {key: httproute/default/usage/rule/0/match/0/*, value: httproute/default/usage/rule/0/match/0/*}
      - {key: rule-1-match--1, value: rule-1-match--1}
    cost: {metadata: {namespace: io.envoy.ai_gateway, key: llm_total_token}}
`

// adjusted returns the adjustment of the limit of rule rule-1-match--1 in
// the client's live configuration, "" when there is none.
func adjusted(c *xdsconfig.Client) string {
	cfg := c.Current()
	if cfg == nil {
		return ""
	}
	for _, r := range cfg.Rules() {
		if r.Levels[len(r.Levels)-1].Key == "rule-1-match--1" {
			if a, ok := cfg.AdjustmentFor(r, r.Limits[0].ID); ok {
				return a.Limit + " " + a.Cost.String()
			}
		}
	}
	return ""
}

// TestAdjustmentsMergedWithPushedRules: adjustments from a file are merged
// with every pushed configuration of their domain. A push that lacks the
// limit an adjustment selects is applied (ACKed) without that adjustment,
// and the adjustment is back once a push has the limit again; changing
// the adjustments changes the live configuration at once.
func TestAdjustmentsMergedWithPushedRules(t *testing.T) {
	adj, err := descriptors.Parse([]descriptors.File{{Name: "adjust.yaml", Data: []byte(egAdjustments)}}, descriptors.Options{AdjustmentsOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	snap := cache.NewSnapshotCache(true, cache.IDHash{}, nil)
	m := xdstest.Start(t, snap, "127.0.0.1:0", nil)
	defer m.Stop()
	c := start(t, xdsconfig.Options{ServerURL: m.Addr()})
	c.SetAdjustments(adj) // before the first push: kept for it

	const want = "tokens metadata io.envoy.ai_gateway/llm_total_token"
	push(t, snap, "1", egConf(2))
	eventually(t, "the first config, adjusted", func() bool { return adjusted(c) == want })
	if got := c.Current().Adjustments("default/eg/http"); len(got) != 1 || got[0].File != "adjust.yaml" || got[0].Line != 3 {
		t.Errorf("Adjustments(default/eg/http) = %+v, want the one of adjust.yaml:3", got)
	}

	// The policy loses its second rule: the push serves, unadjusted.
	push(t, snap, "2", egConf(1))
	eventually(t, "the push without the rule", func() bool {
		cfg := c.Current()
		return cfg != nil && len(cfg.Rules()) == 1
	})
	if got := c.Current().Adjustments("default/eg/http"); got != nil {
		t.Errorf("Adjustments after a push without the limit = %+v, want none", got)
	}
	if n := m.NACKs(); len(n) != 0 {
		t.Errorf("NACKs = %v, want none: an adjustment does not reject the gateway's rules", n)
	}

	push(t, snap, "3", egConf(2))
	eventually(t, "the rule back, adjusted again", func() bool { return adjusted(c) == want })

	c.SetAdjustments(nil)
	if got := adjusted(c); got != "" {
		t.Errorf("after SetAdjustments(nil): adjusted = %q, want none", got)
	}
	if len(c.Current().Rules()) != 2 {
		t.Errorf("after SetAdjustments(nil): %d rules, want the pushed 2", len(c.Current().Rules()))
	}
	c.SetAdjustments(adj)
	if got := adjusted(c); got != want {
		t.Errorf("after SetAdjustments(adj): adjusted = %q, want %q", got, want)
	}
}
