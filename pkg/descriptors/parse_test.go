package descriptors

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

func readFile(t testing.TB, name string) File {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatalf("read testdata: %v", err)
	}
	return File{Name: name, Data: data}
}

func mustParse(t testing.TB, opts Options, names ...string) *Config {
	t.Helper()
	var files []File
	for _, n := range names {
		files = append(files, readFile(t, n))
	}
	c, err := Parse(files, opts)
	if err != nil {
		t.Fatalf("Parse(%v) = %v, want no error", names, err)
	}
	return c
}

// TestGoodFiles loads every testdata/*.yaml that is not *.bad.yaml.
func TestGoodFiles(t *testing.T) {
	paths, err := filepath.Glob("testdata/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range paths {
		name := filepath.Base(p)
		if strings.HasSuffix(name, ".bad.yaml") {
			continue
		}
		n++
		t.Run(name, func(t *testing.T) {
			c := mustParse(t, Options{}, name)
			if len(c.Domains()) != 1 {
				t.Errorf("Domains() = %v, want one domain", c.Domains())
			}
			if len(c.Rules()) == 0 {
				t.Errorf("Rules() is empty, want rules")
			}
		})
	}
	if n < 10 {
		t.Fatalf("found %d good testdata files, want at least 10", n)
	}
}

// TestBadFiles pairs every testdata/*.bad.yaml with its expected error text.
func TestBadFiles(t *testing.T) {
	want := map[string][]string{
		"alias_cycle.bad.yaml": {"alias_cycle.bad.yaml:", "nested more than 64 levels"},
		"adjust_unknown_key.bad.yaml": {
			"3 problems",
			"adjust_unknown_key.bad.yaml:5: costs: config error, unknown key 'costs' in an adjustment; did you mean 'cost'?",
			"adjust_unknown_key.bad.yaml:7: heder: config error, unknown key 'heder' in an adjustment's cost; did you mean 'header'?",
			"adjust_unknown_key.bad.yaml:9: kye: config error, unknown key 'kye' in cost metadata; did you mean 'key'?",
		},
		"adjust_two_sources.bad.yaml": {"adjust_two_sources.bad.yaml:4: cost: cost has header and trailer; want exactly one source"},
		"adjust_no_source.bad.yaml": {
			"3 problems",
			"adjust_no_source.bad.yaml:4: cost: cost needs one source: header, trailer or metadata",
			"adjust_no_source.bad.yaml:5: cost: an adjustment needs cost: {header: NAME}, {trailer: NAME} or {metadata: {namespace: NS, key: KEY}}",
			"adjust_no_source.bad.yaml:7: metadata: metadata needs namespace and key, both non-empty",
		},
		"adjust_unknown_limit.bad.yaml": {
			"adjust_unknown_limit.bad.yaml:3: limit: limit 'tmp' is not a named limit of domain 'llm' (did you mean 'tpm'?); its named limits: tpm, rpm",
			"adjust_unknown_limit.bad.yaml:5: limit: no rule of domain 'llm' has the descriptor path [route=completions]",
		},
		"adjust_money.bad.yaml": {
			"3 problems",
			"adjust_money.bad.yaml:6: cost: the limit 'daily_usd' of rule llm.tenant is in dollars: its cost is {input: SOURCE, output: SOURCE}",
			"adjust_money.bad.yaml:8: cost: cost has input and output, which only a limit in dollars takes; the limit 'tpm' of rule llm.tenant is not",
			"adjust_money.bad.yaml:13: cost: cost has no output: a money limit's cost needs both input and output",
		},
		"adjust_duplicate.bad.yaml": {"adjust_duplicate.bad.yaml:5: limit: limit 'tpm' is adjusted twice in domain 'llm' (also at adjust_duplicate.bad.yaml:3)"},
		"adjust_bad_header.bad.yaml": {
			"adjust_bad_header.bad.yaml:4: header: invalid header name \"x llm tokens\": want an HTTP field name",
			"adjust_bad_header.bad.yaml:6: trailer: invalid trailer name \":status\"",
		},
		"bad_charge.bad.yaml":                 {"bad_charge.bad.yaml:7: charge: invalid charge 'later'"},
		"bad_limit_unit.bad.yaml":             {"bad_limit_unit.bad.yaml:5: unit: invalid rate limit unit 'foo': want one of second, minute, hour, day, week, month, year (any case)"},
		"bad_namespace.bad.yaml":              {"bad_namespace.bad.yaml:1: namespace: invalid namespace \"-tenant/a\""},
		"bad_yaml.bad.yaml":                   {"bad_yaml.bad.yaml:2: error loading config file: yaml: line 2:"},
		"bool_not_bool.bad.yaml":              {"bool_not_bool.bad.yaml:4: shadow_mode: shadow_mode must be a boolean"},
		"both_rate_limit_and_limits.bad.yaml": {"both_rate_limit_and_limits.bad.yaml:7: limits: a descriptor has either rate_limit or limits, not both"},
		"burst_below_rate.bad.yaml":           {"burst_below_rate.bad.yaml:7: burst: burst (5) must be at least requests_per_unit (10)"},
		"cascade_without_entity.bad.yaml":     {"cascade_without_entity.bad.yaml:4: cascade: cascade needs entity: true"},
		"descriptors_not_list.bad.yaml":       {"descriptors_not_list.bad.yaml:2: descriptors: descriptors must be a list"},
		"duplicate_key.bad.yaml":              {"duplicate_key.bad.yaml:8: key: duplicate descriptor composite key 'test-domain.key1_value1'"},
		"duplicate_mapping_key.bad.yaml":      {"duplicate_mapping_key.bad.yaml:4: key: duplicate key 'key'"},
		"empty_domain.bad.yaml":               {"empty_domain.bad.yaml:1: domain: config file cannot have empty domain"},
		"empty_key.bad.yaml":                  {"empty_key.bad.yaml:4: key: descriptor has empty key"},
		"envoy_bootstrap.bad.yaml":            {"envoy_bootstrap.bad.yaml:2: this is an Envoy bootstrap (top-level node, admin, static_resources), not a descriptor file; descriptor files have 'domain:' and 'descriptors:'"},
		// yaml.v3 reports an indentation error at the line before the block
		// it was parsing; the problem names the line to fix.
		"indent_item_deeper.bad.yaml":        {"indent_item_deeper.bad.yaml:7: error loading config file: this line is indented 3 spaces, which lines up with no block above it: indent it 2 or 4 spaces, as the lines it belongs with are (yaml: did not find expected '-' indicator)"},
		"indent_item_shallower.bad.yaml":     {"indent_item_shallower.bad.yaml:7: error loading config file: this line is indented 1 space, which lines up with no block above it: indent it 0 or 2 spaces"},
		"indent_tab.bad.yaml":                {"indent_tab.bad.yaml:5: error loading config file: this line is indented with a tab; YAML indents with spaces only (yaml: line 5: found character that cannot start any token)"},
		"indent_rate_limit_dedent.bad.yaml":  {"indent_rate_limit_dedent.bad.yaml:6: error loading config file: this line is indented 5 spaces, which lines up with no block above it: indent it 4 or 6 spaces"},
		"indent_key_deeper.bad.yaml":         {"indent_key_deeper.bad.yaml:6: error loading config file: this line is indented 8 spaces, which lines up with no block above it: indent it 6 spaces"},
		"indent_value_dedent.bad.yaml":       {"indent_value_dedent.bad.yaml:4: error loading config file: this line is indented 3 spaces, which lines up with no block above it: indent it 2 or 4 spaces"},
		"indent_nested_item_deeper.bad.yaml": {"indent_nested_item_deeper.bad.yaml:9: error loading config file: this line is indented 7 spaces, which lines up with no block above it: indent it 6 or 8 spaces"},
		"extension_misplaced.bad.yaml":       {"extension_misplaced.bad.yaml:4: burst: config error, unknown key 'burst'"},
		"limits_empty.bad.yaml":              {"limits_empty.bad.yaml:4: limits: limits must not be empty"},
		"limits_names.bad.yaml": {
			"limits_names.bad.yaml:5: name: limits entry needs a name",
			"limits_names.bad.yaml:10: name: duplicate limit name 'rpm'",
			"limits_names.bad.yaml:13: name: invalid limit name \"bad name\"",
		},
		"limits_unknown_key.bad.yaml": {"limits_unknown_key.bad.yaml:8: unlimited: config error, unknown key 'unlimited' in limits entry"},
		"merge_depth.bad.yaml":        {"merge_depth.bad.yaml:", "merge keys nested more than 8 deep"},
		"node_budget.bad.yaml":        {"node_budget.bad.yaml: error loading config file: more than 1048576 YAML nodes after expanding aliases"},
		"many_problems.bad.yaml": {
			"3 problems",
			"many_problems.bad.yaml:5: unit: invalid rate limit unit 'fortnight'",
			"many_problems.bad.yaml:11: shadowmode: config error, unknown key 'shadowmode'",
			"many_problems.bad.yaml:12: key: descriptor has empty key",
		},
		"misspelled_key.bad.yaml":          {"misspelled_key.bad.yaml:5: ratelimit: config error, unknown key 'ratelimit'; did you mean 'rate_limit'?"},
		"misspelled_key2.bad.yaml":         {"misspelled_key2.bad.yaml:7: requestsperunit: config error, unknown key 'requestsperunit'; did you mean 'requests_per_unit'?"},
		"multiplier_overflow.bad.yaml":     {"multiplier_overflow.bad.yaml:7: unit_multiplier: unit_multiplier 4000000000 makes the period too long"},
		"negative_requests.bad.yaml":       {"negative_requests.bad.yaml:6: requests_per_unit: requests_per_unit must be a whole number"},
		"non_map_list.bad.yaml":            {"non_map_list.bad.yaml:3: descriptors: config error, yaml file contains list of type other than map: a"},
		"non_string_key.bad.yaml":          {"non_string_key.bad.yaml:1: 0.25: config error, key is not of type string: 0.25"},
		"not_a_mapping.bad.yaml":           {"not_a_mapping.bad.yaml:1: error loading config file: the document must be a mapping"},
		"quoted_number.bad.yaml":           {"quoted_number.bad.yaml:6: requests_per_unit: requests_per_unit must be a whole number"},
		"replaces_empty.bad.yaml":          {"replaces_empty.bad.yaml:8: replaces: should not have an empty replaces entry"},
		"replaces_self.bad.yaml":           {"replaces_self.bad.yaml:9: replaces: replaces should not contain name of same descriptor"},
		"share_threshold_literal.bad.yaml": {"share_threshold_literal.bad.yaml:5: share_threshold: share_threshold can only be used with wildcard values"},
		"too_many_requests.bad.yaml":       {"too_many_requests.bad.yaml:6: requests_per_unit: requests_per_unit must be at most 1000000000000"},
		"two_resources.bad.yaml":           {"two_resources.bad.yaml:7: resource: at most one resource level per path"},
		"unlimited_with_unit.bad.yaml":     {"unlimited_with_unit.bad.yaml:6: unit: should not specify rate limit unit when unlimited"},
		"zero_unit_multiplier.bad.yaml":    {"zero_unit_multiplier.bad.yaml:8: unit_multiplier: unit_multiplier must be at least 1"},
	}
	paths, err := filepath.Glob("testdata/*.bad.yaml")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, p := range paths {
		name := filepath.Base(p)
		seen[name] = true
		t.Run(name, func(t *testing.T) {
			subs, ok := want[name]
			if !ok {
				t.Fatalf("no expected error for %s: add it to the table", name)
			}
			c, err := Parse([]File{readFile(t, name)}, Options{})
			if err == nil {
				t.Fatalf("Parse(%s) = %v, nil; want an error", name, c)
			}
			var e *Error
			if !errors.As(err, &e) || len(e.Problems) == 0 {
				t.Fatalf("Parse(%s) error = %T %v, want *Error with problems", name, err, err)
			}
			for _, s := range subs {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("Parse(%s) error =\n%v\nwant it to contain %q", name, err, s)
				}
			}
			for _, p := range e.Problems {
				if p.File != name {
					t.Errorf("problem %v names file %q, want %q", p, p.File, name)
				}
			}
		})
	}
	for name := range want {
		if !seen[name] {
			t.Errorf("table names %s, which is not in testdata", name)
		}
	}
}

func TestParseAcrossFiles(t *testing.T) {
	tests := []struct {
		name  string
		files []string
		opts  Options
		want  string // expected error substring; "" for success
	}{
		{"duplicate domain", []string{"basic_config.yaml", "duplicate_domain.yaml"}, Options{},
			"duplicate_domain.yaml:1: domain: duplicate domain 'test-domain' in config file"},
		{"merged domains", []string{"merge_domain_key1.yaml", "merge_domain_key2.yaml"}, Options{MergeDomains: true}, ""},
		{"merged duplicate key", []string{"merge_domain_key1.yaml", "merge_domain_key1.yaml"}, Options{MergeDomains: true},
			"merge_domain_key1.yaml:3: key: duplicate descriptor composite key 'test-domain.key1_value1'"},
		{"problems from every file", []string{"bad_charge.bad.yaml", "empty_key.bad.yaml"}, Options{},
			"2 problems:\nbad_charge.bad.yaml:7: charge: invalid charge 'later': want pre or post\nempty_key.bad.yaml:4: key: descriptor has empty key"},
		{"distinct domains", []string{"basic_config.yaml", "example.yaml", "quota.yaml", "mongo_cps.yaml"}, Options{}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var files []File
			for _, n := range tt.files {
				files = append(files, readFile(t, n))
			}
			_, err := Parse(files, tt.opts)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Parse(%v) = %v, want no error", tt.files, err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("Parse(%v) = %v, want error containing %q", tt.files, err, tt.want)
			}
		})
	}
}

func TestEmptyInput(t *testing.T) {
	tests := []struct{ name, data, want string }{
		{"empty file", "", "e.yaml:1: domain: config file cannot have empty domain"},
		{"comment only", "# nothing\n", "e.yaml:1: domain: config file cannot have empty domain"},
		{"null domain", "domain:\n", "e.yaml:1: domain: config file cannot have empty domain"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]File{{Name: "e.yaml", Data: []byte(tt.data)}}, Options{})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Parse(%q) = %v, want error containing %q", tt.data, err, tt.want)
			}
		})
	}
	c, err := Parse(nil, Options{})
	if err != nil || len(c.Domains()) != 0 || len(c.Rules()) != 0 {
		t.Errorf("Parse(nil) = %v, %v; want an empty config", c, err)
	}
}

func TestLimits(t *testing.T) {
	c := mustParse(t, Options{}, "extensions.yaml", "unit_multiplier.yaml", "example.yaml")
	bucket := func(req uint64, period time.Duration, burst uint64) tokenbucket.Limit {
		l, err := tokenbucket.Rate(req, period, burst)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	byKey := map[string]*Rule{}
	for _, r := range c.Rules() {
		byKey[r.FullKey] = r
	}
	tests := []struct {
		key  string
		want []Limit
	}{
		{"llm.tenant.project.api_key.model", []Limit{
			{Name: "rpm", ID: "rpm", Unit: Minute, RequestsPerUnit: 60, UnitMultiplier: 1, Burst: 120, Bucket: bucket(60, time.Minute, 120)},
			{Name: "tpm", ID: "tpm", Unit: Minute, RequestsPerUnit: 100000, UnitMultiplier: 1, Charge: ChargePost, Bucket: bucket(100000, time.Minute, 0)},
			{Name: "daily", ID: "daily", Unit: Hour, RequestsPerUnit: 1000000, UnitMultiplier: 24, Bucket: bucket(1000000, 24*time.Hour, 0)},
		}},
		{"llm.route_/chat", []Limit{
			{Name: "chat", ID: "chat", Unit: Second, RequestsPerUnit: 10, UnitMultiplier: 1, Burst: 50, Charge: ChargePre, Bucket: bucket(10, time.Second, 50)},
		}},
		{"test-domain.key1", []Limit{
			{ID: "default", Unit: Minute, RequestsPerUnit: 20, UnitMultiplier: 5, Bucket: bucket(20, 5*time.Minute, 0)},
		}},
		{"rl.foo.bar_banned", []Limit{
			{ID: "default", Unit: Minute, RequestsPerUnit: 0, UnitMultiplier: 1, Deny: true},
		}},
		{"rl.qux", nil},
	}
	for _, tt := range tests {
		r := byKey[tt.key]
		if r == nil {
			t.Errorf("no rule %q", tt.key)
			continue
		}
		if !reflect.DeepEqual(r.Limits, tt.want) {
			t.Errorf("rule %q Limits = %+v, want %+v", tt.key, r.Limits, tt.want)
		}
	}
	if r := byKey["rl.qux"]; r == nil || !r.Unlimited {
		t.Errorf("rule rl.qux = %+v, want Unlimited", r)
	}
	r := byKey["llm.tenant.project.api_key.model"]
	if r.Namespace != "tenant-a" {
		t.Errorf("Namespace = %q, want tenant-a", r.Namespace)
	}
	wantLevels := []Level{
		{Key: "tenant", Entity: true},
		{Key: "project", Entity: true, Cascade: true},
		{Key: "api_key", Entity: true, Cascade: true},
		{Key: "model", Resource: true},
	}
	if !reflect.DeepEqual(r.Levels, wantLevels) {
		t.Errorf("Levels = %+v, want %+v", r.Levels, wantLevels)
	}
	if got := byKey["test-domain.key2"].Namespace; got != "" {
		t.Errorf("Namespace of a file without namespace = %q, want \"\" (the deployment's)", got)
	}
	if r.File != "extensions.yaml" || r.Line != 17 {
		t.Errorf("rule position = %s:%d, want extensions.yaml:17", r.File, r.Line)
	}
}

func TestRuleFlags(t *testing.T) {
	c := mustParse(t, Options{}, "metadata.yaml")
	r, _ := c.Match("test-domain", []Entry{{"key2", "x"}})
	if r.Rule == nil {
		t.Fatal("no rule for key2")
	}
	wantMD := map[string]string{"service_with_quota.name": "service_2", "service_with_quota.weights.0": "1", "service_with_quota.weights.1": "2"}
	if !reflect.DeepEqual(r.Rule.Metadata, wantMD) {
		t.Errorf("Metadata = %v, want %v", r.Rule.Metadata, wantMD)
	}
	wantTree := map[string]any{"service_with_quota": map[string]any{"name": "service_2", "weights": []any{int64(1), int64(2)}}}
	if !reflect.DeepEqual(r.Rule.MetadataTree, wantTree) {
		t.Errorf("MetadataTree = %#v, want %#v", r.Rule.MetadataTree, wantTree)
	}

	q := mustParse(t, Options{}, "quota.yaml")
	m, ok := q.Match("quota", []Entry{{"service", "service_2"}})
	if !ok || !m.Rule.QuotaMode || m.Rule.Limits[0].RequestsPerUnit != 2 {
		t.Errorf("Match(quota service_2) = %+v, %v; want quota-mode rule of 2/minute", m.Rule, ok)
	}

	rep := mustParse(t, Options{}, "replaces.yaml")
	m, _ = rep.Match("example7", []Entry{{"key_2", "value_2"}, {"user", "bkthomps"}})
	if m.Rule == nil || !reflect.DeepEqual(m.Rule.Replaces, []string{"specific_limit"}) {
		t.Errorf("Match(example7 key_2) rule = %+v, want replaces [specific_limit]", m.Rule)
	}
	m, _ = rep.Match("example7", []Entry{{"key_1", "value_1"}, {"user", "bkthomps"}})
	if m.Rule == nil || m.Rule.Name != "specific_limit" || m.Rule.Limits[0].ID != "specific_limit" {
		t.Errorf("Match(example7 key_1) rule = %+v, want name specific_limit", m.Rule)
	}
}

func TestYAMLCompat(t *testing.T) {
	c := mustParse(t, Options{}, "yaml_compat.yaml")
	tests := []struct {
		entries []Entry
		rpu     uint64
		shadow  bool
	}{
		{[]Entry{{"client_id", "1234"}}, 16, true},
		{[]Entry{{"other", "anything"}}, 7, false},
		{[]Entry{{"ignored", "x"}}, 1, false},
	}
	for _, tt := range tests {
		m, ok := c.Match("compat", tt.entries)
		if !ok {
			t.Errorf("Match(%v) found nothing", tt.entries)
			continue
		}
		if got := m.Rule.Limits[0]; got.RequestsPerUnit != tt.rpu || got.Unit != Minute && tt.rpu != 1 || m.Rule.ShadowMode != tt.shadow {
			t.Errorf("Match(%v) = %+v shadow %v, want %d per unit, shadow %v", tt.entries, got, m.Rule.ShadowMode, tt.rpu, tt.shadow)
		}
	}
	if _, ok := c.Match("compat", []Entry{{"norule", "x"}}); ok {
		t.Errorf("Match(norule) found a rule; rate_limit: null means none")
	}
	var got []string
	for _, w := range c.Warnings() {
		got = append(got, w.Error())
	}
	want := []string{
		"yaml_compat.yaml:18: requests_per_unit: key 'requests_per_unit' has no effect in a descriptor (rate_limit's fields go indented under rate_limit:); ignored",
		"yaml_compat.yaml:22: shadow_mode: key 'shadow_mode' has no effect in rate_limit; ignored",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Warnings() = %q, want %q", got, want)
	}
}

func TestUnits(t *testing.T) {
	tests := []struct {
		in   string
		want Unit
		ok   bool
		name string
		d    time.Duration
	}{
		{"second", Second, true, "SECOND", time.Second},
		{"Minute", Minute, true, "MINUTE", time.Minute},
		{"HOUR", Hour, true, "HOUR", time.Hour},
		{"day", Day, true, "DAY", 24 * time.Hour},
		{"week", Week, true, "WEEK", 7 * 24 * time.Hour},
		{"month", Month, true, "MONTH", 30 * 24 * time.Hour},
		{"year", Year, true, "YEAR", 365 * 24 * time.Hour},
		{"unknown", UnitUnknown, false, "UNKNOWN", 0},
		{"", UnitUnknown, false, "UNKNOWN", 0},
		{"fortnight", UnitUnknown, false, "UNKNOWN", 0},
	}
	for _, tt := range tests {
		u, ok := ParseUnit(tt.in)
		if u != tt.want || ok != tt.ok {
			t.Errorf("ParseUnit(%q) = %v, %v; want %v, %v", tt.in, u, ok, tt.want, tt.ok)
		}
		if u.String() != tt.name || u.Duration() != tt.d {
			t.Errorf("%v: String() = %q, Duration() = %v; want %q, %v", u, u.String(), u.Duration(), tt.name, tt.d)
		}
	}
	// Envoy's enum numbers.
	if Second != 1 || Minute != 2 || Hour != 3 || Day != 4 || Month != 5 || Year != 6 || Week != 7 {
		t.Errorf("unit numbers differ from Envoy's RateLimitResponse_RateLimit_Unit")
	}
}

// TestDumpNamespace wants /rlconfig's dump to show the namespace each rule
// really uses: its file's, or the deployment's for a file without one, and
// nothing for the latter when no deployment namespace is given (Dump).
func TestDumpNamespace(t *testing.T) {
	c := mustParse(t, Options{}, "extensions.yaml", "example.yaml")
	const own, plain = "tenant-a", "rl.qux: unit=UNKNOWN requests_per_unit=0, unlimited: true, shadow_mode: false"
	cases := []struct {
		deployment string
		want       string // plain's line
	}{
		{"", plain + "\n"},
		{"team-b", plain + ", namespace: team-b\n"},
	}
	for _, cs := range cases {
		dump := c.DumpIn(cs.deployment)
		if !strings.Contains(dump, cs.want) {
			t.Errorf("DumpIn(%q) =\n%s\nwant a line %q", cs.deployment, dump, cs.want)
		}
		for _, line := range strings.Split(strings.TrimSuffix(dump, "\n"), "\n") {
			want := ", namespace: " + own // the file's own
			if !strings.HasPrefix(line, "llm.") {
				want = ", namespace: " + cs.deployment
			}
			switch has := strings.HasSuffix(line, want); {
			case want == ", namespace: " && strings.Contains(line, "namespace:"):
				t.Errorf("DumpIn(%q) line %q: want no namespace", cs.deployment, line)
			case want != ", namespace: " && !has:
				t.Errorf("DumpIn(%q) line %q: want it to end with %q", cs.deployment, line, want)
			}
		}
	}
	if c.Dump() != c.DumpIn("") {
		t.Errorf("Dump() != DumpIn(\"\")")
	}
}

func TestDomainsAndDump(t *testing.T) {
	c := mustParse(t, Options{}, "quota.yaml", "mongo_cps.yaml", "example.yaml")
	if got, want := c.Domains(), []string{"mongo_cps", "quota", "rl"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Domains() = %v, want %v", got, want)
	}
	if !c.HasDomain("rl") || c.HasDomain("nope") {
		t.Errorf("HasDomain(rl), HasDomain(nope) = %v, %v; want true, false", c.HasDomain("rl"), c.HasDomain("nope"))
	}
	dump := c.Dump()
	for _, line := range []string{
		"quota.service_service_1: unit=MINUTE requests_per_unit=1, shadow_mode: false, quota_mode: true\n",
		"rl.foo.baz_shady: unit=MINUTE requests_per_unit=1, shadow_mode: true\n",
		"rl.qux: unit=UNKNOWN requests_per_unit=0, unlimited: true, shadow_mode: false\n",
	} {
		if !strings.Contains(dump, line) {
			t.Errorf("Dump() =\n%s\nwant a line %q", dump, line)
		}
	}
	if n := strings.Count(dump, "\n"); n != len(c.Rules()) {
		t.Errorf("Dump() has %d lines, want one per rule (%d)", n, len(c.Rules()))
	}
	var keys []string
	for _, r := range c.Rules() {
		keys = append(keys, r.FullKey)
	}
	// Load order: the files as given, each file's descriptors as written
	// (not sorted: mongo_cps comes after quota, rl.foo.baz_shady after
	// rl.foo.bay).
	want := []string{
		"quota.service_service_1", "quota.service_service_2",
		"mongo_cps.database_users", "mongo_cps.database_default",
		"rl.source_cluster_proxy.destination_cluster_mock", "rl.foo", "rl.foo.bar", "rl.foo.bar_banned",
		"rl.foo.baz", "rl.foo.bay", "rl.foo.baz_shady", "rl.qux",
	}
	if !reflect.DeepEqual(keys, want) {
		t.Errorf("Rules() order = %q, want load order %q", keys, want)
	}
}
