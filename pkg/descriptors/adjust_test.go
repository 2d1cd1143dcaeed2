package descriptors

import (
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// TestAdjustmentsParse: the three cost sources and a descriptor selection
// load as written, header names lower-cased, in load order.
func TestAdjustmentsParse(t *testing.T) {
	c := mustParse(t, Options{}, "adjustments.yaml")
	want := []Adjustment{
		{Limit: "tpm", Cost: CostSource{Header: "x-llm-tokens"}, File: "adjustments.yaml", Line: 3},
		{Limit: "tpd", Cost: CostSource{Trailer: "x-llm-tokens"}, File: "adjustments.yaml", Line: 5},
		{Limit: "output", Cost: CostSource{MetadataNamespace: "io.envoy.ai_gateway", MetadataKey: "llm_output_token"}, File: "adjustments.yaml", Line: 7},
		{Limit: "route-usage", Cost: CostSource{MetadataNamespace: "io.envoy.ai_gateway", MetadataKey: "llm_total_token"},
			Descriptor: []Entry{{"route", "chat"}}, File: "adjustments.yaml", Line: 10},
	}
	if got := c.Adjustments("llm"); !reflect.DeepEqual(got, want) {
		t.Errorf("Adjustments(llm) =\n%+v\nwant\n%+v", got, want)
	}
	if got := c.AdjustedDomains(); !reflect.DeepEqual(got, []string{"llm"}) {
		t.Errorf("AdjustedDomains() = %v, want [llm]", got)
	}
	if got := c.Adjustments("other"); got != nil {
		t.Errorf("Adjustments(other) = %v, want nil", got)
	}
	if got := mustParse(t, Options{}, "basic_config.yaml").Adjustments("test-domain"); got != nil {
		t.Errorf("Adjustments of a file without adjustments = %v, want nil", got)
	}
}

// TestAdjustmentFor: each limit of each rule is answered with the
// adjustment that selects it, by name or by the rule's path; the limits no
// adjustment names are not adjusted.
func TestAdjustmentFor(t *testing.T) {
	c := mustParse(t, Options{}, "adjustments.yaml")
	rules := c.Rules()
	if len(rules) != 2 {
		t.Fatalf("Rules() = %d rules, want 2", len(rules))
	}
	key, route := rules[0], rules[1]
	tests := []struct {
		rule *Rule
		id   string
		want string // Adjustment.Limit; "" for none
	}{
		{key, "tpm", "tpm"},
		{key, "tpd", "tpd"},
		{key, "output", "output"},
		{key, "default", ""},
		{route, "default", "route-usage"},
		{route, "tpm", ""},
	}
	for _, tt := range tests {
		a, ok := c.AdjustmentFor(tt.rule, tt.id)
		if ok != (tt.want != "") || a.Limit != tt.want {
			t.Errorf("AdjustmentFor(%s, %q) = %q, %v; want %q", tt.rule.FullKey, tt.id, a.Limit, ok, tt.want)
		}
	}
	if key.Limits[0].Charge != ChargePost {
		t.Errorf("tpm charge = %v, want post (an adjustment on a charge: post limit is allowed)", key.Limits[0].Charge)
	}
	if _, ok := (*Config)(nil).AdjustmentFor(key, "tpm"); ok {
		t.Error("nil Config: AdjustmentFor = true, want false")
	}
}

// TestAdjustmentsFileOfTheirOwn: a file with domain: and adjustments: only
// adds adjustments to the domain another file defines rules for, without
// MERGE_DOMAIN_CONFIG, and does not make the domain known by itself.
func TestAdjustmentsFileOfTheirOwn(t *testing.T) {
	rules := File{Name: "rules.yaml", Data: []byte("domain: llm\ndescriptors:\n  - key: api_key\n    limits:\n      - {name: tpm, unit: minute, requests_per_unit: 10}\n")}
	adj := File{Name: "adjust.yaml", Data: []byte("domain: llm\nadjustments:\n  - limit: tpm\n    cost: {header: x-llm-tokens}\n")}
	for _, order := range [][]File{{rules, adj}, {adj, rules}} {
		c, err := Parse(order, Options{})
		if err != nil {
			t.Fatalf("Parse(%s, %s) = %v", order[0].Name, order[1].Name, err)
		}
		a, ok := c.AdjustmentFor(c.Rules()[0], "tpm")
		if !ok || a.File != "adjust.yaml" || a.Cost.Header != "x-llm-tokens" {
			t.Errorf("AdjustmentFor(tpm) = %+v, %v; want the one of adjust.yaml", a, ok)
		}
	}
	c, err := Parse([]File{adj}, Options{})
	if err == nil || !strings.Contains(err.Error(), "adjust.yaml:3: limit: adjustment of limit 'tpm': domain 'llm' has no rules") {
		t.Errorf("Parse(adjustments without rules) = %v, want the domain has no rules", err)
	}
	if c != nil {
		t.Errorf("Parse(adjustments without rules) = %v, want no config", c)
	}
}

// unnamedRules are rules as Envoy Gateway pushes them over xDS: unnamed
// limits under a route's descriptor.
const unnamedRules = `domain: default/eg/http
descriptors:
  - key: httproute/default/usage/rule/0/match/0/*
    value: httproute/default/usage/rule/0/match/0/*
    descriptors:
      - key: rule-0-match--1
        value: rule-0-match--1
        rate_limit: {unit: hour, requests_per_unit: 21}
      - key: rule-1-match--1
        value: rule-1-match--1
        rate_limit: {unit: minute, requests_per_unit: 5}
`

// TestAdjustmentsByDescriptor: descriptor: selects an unnamed limit by its
// rule's path, and limit: gives it the name the adjustment goes by; what
// the path or the limit cannot select is a problem with file and line.
func TestAdjustmentsByDescriptor(t *testing.T) {
	const path = "    descriptor:\n      - {key: httproute/default/usage/rule/0/match/0/*, value: httproute/default/usage/rule/0/match/0/*}\n"
	good := "domain: default/eg/http\nadjustments:\n  - limit: usage\n" + path + "      - {key: rule-0-match--1, value: rule-0-match--1}\n    cost: {header: x-request-cost}\n"
	c, err := Parse([]File{{Name: "rules.yaml", Data: []byte(unnamedRules)}, {Name: "adjust.yaml", Data: []byte(good)}}, Options{})
	if err != nil {
		t.Fatalf("Parse = %v", err)
	}
	r0, r1 := c.Rules()[0], c.Rules()[1]
	if a, ok := c.AdjustmentFor(r0, "default"); !ok || a.Limit != "usage" {
		t.Errorf("AdjustmentFor(rule 0) = %+v, %v; want usage", a, ok)
	}
	if _, ok := c.AdjustmentFor(r1, "default"); ok {
		t.Error("AdjustmentFor(rule 1) = true, want false: the path selects rule 0 only")
	}
	if r0.Limits[0].Name != "" {
		t.Errorf("rule 0's limit is named %q, want it unnamed still (the answer names it)", r0.Limits[0].Name)
	}

	bad := []struct{ adj, want string }{
		{"  - limit: usage\n    cost: {header: x}\n",
			"adjust.yaml:3: limit: limit 'usage' is not a limit of domain 'default/eg/http', whose limits have no names; name one (rate_limit.name or a limits: entry), or select its rule with descriptor:"},
		{"  - limit: usage\n" + path + "    cost: {header: x}\n",
			"adjust.yaml:3: limit: no rule of domain 'default/eg/http' has the descriptor path [httproute/default/usage/rule/0/match/0/*=httproute/default/usage/rule/0/match/0/*]"},
		{"  - limit: a\n" + path + "      - {key: rule-0-match--1, value: rule-0-match--1}\n    cost: {header: x}\n" +
			"  - limit: b\n" + path + "      - {key: rule-0-match--1, value: rule-0-match--1}\n    cost: {header: y}\n",
			"adjust.yaml:8: limit: the limit 'default' of rule default/eg/http.httproute/default/usage/rule/0/match/0/*_httproute/default/usage/rule/0/match/0/*.rule-0-match--1_rule-0-match--1 is already adjusted by the adjustment at adjust.yaml:3"},
		{"  - limit: bad name\n" + path + "    cost: {header: x}\n", "adjust.yaml:3: limit: invalid limit name \"bad name\""},
		{"  - limit: u\n    descriptor: []\n    cost: {header: x}\n", "adjust.yaml:4: descriptor: descriptor must list the selected rule's levels"},
		{"  - limit: u\n    descriptor:\n      - {value: v}\n    cost: {header: x}\n", "adjust.yaml:5: key: descriptor level has empty key"},
	}
	for _, tt := range bad {
		_, err := Parse([]File{{Name: "rules.yaml", Data: []byte(unnamedRules)}, {Name: "adjust.yaml", Data: []byte("domain: default/eg/http\nadjustments:\n" + tt.adj)}}, Options{})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(\n%s) = %v\nwant %q", tt.adj, err, tt.want)
		}
	}
}

// TestAdjustmentsOfNamedRule: a descriptor selection of a rule with named
// limits must name one of them; an unlimited rule has none.
func TestAdjustmentsOfNamedRule(t *testing.T) {
	rules := "domain: d\ndescriptors:\n  - key: k\n    limits:\n      - {name: a, unit: minute, requests_per_unit: 1}\n      - {name: b, unit: minute, requests_per_unit: 1}\n" +
		"  - key: free\n    rate_limit: {unlimited: true}\n"
	for _, tt := range []struct{ adj, want string }{
		{"  - {limit: c, descriptor: [{key: k}], cost: {header: x}}\n", "f.yaml:10: limit: rule d.k selected by descriptor has no limit named 'c'; its limits: a, b"},
		{"  - {limit: c, descriptor: [{key: free}], cost: {header: x}}\n", "f.yaml:10: limit: rule d.free selected by descriptor is unlimited"},
	} {
		_, err := Parse([]File{{Name: "f.yaml", Data: []byte(rules + "adjustments:\n" + tt.adj)}}, Options{})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%s) = %v, want %q", tt.adj, err, tt.want)
		}
	}
	c, err := Parse([]File{{Name: "f.yaml", Data: []byte(rules + "adjustments:\n  - {limit: b, descriptor: [{key: k}], cost: {header: x}}\n")}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if a, ok := c.AdjustmentFor(c.Rules()[0], "b"); !ok || a.Limit != "b" {
		t.Errorf("AdjustmentFor(b) = %+v, %v; want b", a, ok)
	}
	if _, ok := c.AdjustmentFor(c.Rules()[0], "a"); ok {
		t.Error("AdjustmentFor(a) = true, want false")
	}
}

// TestAdjustmentsOnly: files for rules that arrive over xDS hold domain:
// and adjustments: only; their limits are checked when merged.
func TestAdjustmentsOnly(t *testing.T) {
	adj := File{Name: "adjust.yaml", Data: []byte("domain: llm\nadjustments:\n  - limit: tpm\n    cost: {header: x-llm-tokens}\n  - limit: gone\n    cost: {trailer: x-llm-tokens}\n")}
	file, err := Parse([]File{adj}, Options{AdjustmentsOnly: true})
	if err != nil {
		t.Fatalf("Parse(AdjustmentsOnly) = %v", err)
	}
	if got := len(file.Adjustments("llm")); got != 2 {
		t.Errorf("Adjustments(llm) = %d, want 2 as written", got)
	}
	if len(file.Domains()) != 0 || len(file.Rules()) != 0 {
		t.Errorf("Domains() = %v, Rules() = %d; want none", file.Domains(), len(file.Rules()))
	}
	withRules := File{Name: "rules.yaml", Data: []byte("domain: llm\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n")}
	ignored, err := Parse([]File{withRules}, Options{AdjustmentsOnly: true})
	if err != nil || len(ignored.Rules()) != 0 || len(ignored.Warnings()) != 1 ||
		!strings.Contains(ignored.Warnings()[0].Error(), "rules.yaml:1: descriptors: the rules arrive over xDS: this file's descriptors are ignored") {
		t.Errorf("Parse(rules, AdjustmentsOnly) = %v; want its descriptors ignored with a warning", err)
	}
}

// TestWithAdjustments: merging adjustments into rules that came without
// them keeps those that select a limit and reports the others (domain by
// domain, in sorted order), which leaves the rules as they are.
func TestWithAdjustments(t *testing.T) {
	rules, err := Parse([]File{{Name: "xds:llm", Data: []byte("domain: llm\ndescriptors:\n  - key: k\n    limits:\n      - {name: tpm, unit: minute, requests_per_unit: 10}\n")}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	adj, err := Parse([]File{{Name: "adjust.yaml", Data: []byte(
		"domain: llm\nadjustments:\n  - limit: tpm\n    cost: {header: x-llm-tokens}\n  - limit: tpd\n    cost: {header: x-llm-tokens}\n")}, {Name: "other.yaml", Data: []byte("domain: absent\nadjustments:\n  - limit: tpm\n    cost: {header: x}\n")}}, Options{AdjustmentsOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	merged, problems := rules.WithAdjustments(adj)
	want := []string{
		"other.yaml:3: limit: adjustment of limit 'tpm': domain 'absent' has no rules",
		"adjust.yaml:5: limit: limit 'tpd' is not a named limit of domain 'llm' (did you mean 'tpm'?); its named limits: tpm",
	}
	var got []string
	for _, p := range problems {
		got = append(got, p.Error())
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("WithAdjustments problems =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if ws := merged.Warnings(); len(ws) != 2 {
		t.Errorf("merged Warnings() = %v, want the two problems", ws)
	}
	if a, ok := merged.AdjustmentFor(merged.Rules()[0], "tpm"); !ok || a.Cost.Header != "x-llm-tokens" {
		t.Errorf("merged AdjustmentFor(tpm) = %+v, %v; want the header", a, ok)
	}
	if got := merged.Adjustments("llm"); len(got) != 1 || got[0].Limit != "tpm" {
		t.Errorf("merged Adjustments(llm) = %+v, want tpm only", got)
	}
	if rules.Adjustments("llm") != nil || len(rules.Warnings()) != 0 {
		t.Error("WithAdjustments changed the Config it was called on")
	}
	if m, ps := rules.WithAdjustments(nil); m != rules || ps != nil {
		t.Errorf("WithAdjustments(nil) = %p, %v; want the same Config", m, ps)
	}
	if _, ok := merged.Match("llm", []Entry{{"k", "v"}}); !ok {
		t.Error("merged Match(llm, k) = false, want the rule")
	}
}

// TestDumpAdjustments: /rlconfig ends with one line per adjustment.
func TestDumpAdjustments(t *testing.T) {
	dump := mustParse(t, Options{}, "adjustments.yaml").Dump()
	want := "llm.api_key: limits=[tpm: unit=MINUTE requests_per_unit=100000 charge=post; tpd: unit=DAY requests_per_unit=1000000; output: unit=MINUTE requests_per_unit=50000], shadow_mode: false\n" +
		"llm.route_chat: unit=HOUR requests_per_unit=21, shadow_mode: false\n" +
		"llm adjustment tpm: cost=header x-llm-tokens (adjustments.yaml:3)\n" +
		"llm adjustment tpd: cost=trailer x-llm-tokens (adjustments.yaml:5)\n" +
		"llm adjustment output: cost=metadata io.envoy.ai_gateway/llm_output_token (adjustments.yaml:7)\n" +
		"llm adjustment route-usage: descriptor=[route=chat] cost=metadata io.envoy.ai_gateway/llm_total_token (adjustments.yaml:10)\n"
	if dump != want {
		t.Errorf("Dump() =\n%s\nwant\n%s", dump, want)
	}
}

// TestAdjustmentsOfAChain: a limit name adjusts that limit on every level
// of a hierarchy that has it; each tier names its rule for AdjustmentFor.
func TestAdjustmentsOfAChain(t *testing.T) {
	const chain = `domain: llm
adjustments:
  - {limit: tpm, cost: {header: x-llm-tokens}}
descriptors:
  - key: tenant
    entity: true
    limits: [{name: tpm, unit: minute, requests_per_unit: 1000}]
    descriptors:
      - key: project
        entity: true
        limits: [{name: rpm, unit: minute, requests_per_unit: 10}]
        descriptors:
          - key: api_key
            entity: true
            cascade: true
            limits: [{name: tpm, unit: minute, requests_per_unit: 100}]
`
	c, err := Parse([]File{{Name: "f.yaml", Data: []byte(chain)}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	m, ok := c.Match("llm", []Entry{{"tenant", "t"}, {"project", "p"}, {"api_key", "k"}})
	if !ok {
		t.Fatal("Match = false, want the api_key rule")
	}
	var got []string
	for _, tier := range m.Tiers() {
		for _, l := range tier.Limits {
			_, adjusted := c.AdjustmentFor(tier.Rule, l.ID)
			got = append(got, tier.Key+"/"+l.ID+"="+strconv.FormatBool(adjusted))
		}
	}
	want := []string{"api_key/tpm=true", "project/rpm=false", "tenant/tpm=true"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("tiers' limits adjusted = %v, want %v", got, want)
	}
}

// TestAdjustmentLookups: HasAdjustments and AdjustmentNamed answer from
// the loaded adjustments; a path-selected one is not found by name.
func TestAdjustmentLookups(t *testing.T) {
	c := mustParse(t, Options{}, "adjustments.yaml")
	if !c.HasAdjustments("llm") || c.HasAdjustments("other") {
		t.Errorf("HasAdjustments(llm, other) = %v, %v; want true, false", c.HasAdjustments("llm"), c.HasAdjustments("other"))
	}
	if a, ok := c.AdjustmentNamed("llm", "tpm"); !ok || a.Cost.Header != "x-llm-tokens" {
		t.Errorf("AdjustmentNamed(llm, tpm) = %+v, %v", a, ok)
	}
	if _, ok := c.AdjustmentNamed("llm", "route-usage"); ok {
		t.Error("AdjustmentNamed found an adjustment that selects by descriptor path")
	}
	var none *Config
	if none.HasAdjustments("llm") {
		t.Error("a nil Config has adjustments")
	}
}
