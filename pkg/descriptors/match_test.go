package descriptors

import (
	"reflect"
	"sync"
	"testing"
)

func e(kv ...string) []Entry {
	var out []Entry
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, Entry{kv[i], kv[i+1]})
	}
	return out
}

// TestMatch mirrors envoyproxy/ratelimit's GetLimit tests
// (test/config/config_test.go): request → rule (by FullKey) and metric key.
func TestMatch(t *testing.T) {
	c := mustParse(t, Options{}, "basic_config.yaml")
	wc := mustParse(t, Options{}, "wildcard.yaml")
	st := mustParse(t, Options{}, "share_threshold.yaml")
	vm := mustParse(t, Options{}, "value_to_metric.yaml")
	ex := mustParse(t, Options{}, "example.yaml")
	tests := []struct {
		name     string
		cfg      *Config
		domain   string
		entries  []Entry
		fullKey  string  // "" for no match
		metric   string  // "" means fullKey
		entries2 []Entry // expected Match.Entries when shared
	}{
		// basic_config.yaml
		{"unknown domain", c, "foo_domain", e("key1", "value1"), "", "", nil},
		{"empty descriptor", c, "test-domain", nil, "", "", nil},
		{"value without rule or default", c, "test-domain", e("key1", "something"), "", "", nil},
		{"whitelisted parent", c, "test-domain", e("key1", "value1"), "", "", nil},
		{"too deep under leaf", c, "test-domain", e("key2", "value2", "subkey", "subvalue"), "", "", nil},
		{"unmatched second level", c, "test-domain", e("key5", "value5", "subkey5", "subvalue"), "", "", nil},
		{"second level key only", c, "test-domain", e("key1", "value1", "subkey1", "something"), "test-domain.key1_value1.subkey1", "", nil},
		{"second level key value", c, "test-domain", e("key1", "value1", "subkey1", "subvalue1"), "test-domain.key1_value1.subkey1_subvalue1", "", nil},
		{"first level key only", c, "test-domain", e("key2", "something"), "test-domain.key2", "", nil},
		{"first level key value", c, "test-domain", e("key2", "value2"), "test-domain.key2_value2", "", nil},
		{"whitelisted value", c, "test-domain", e("key2", "value3"), "", "", nil},
		{"hour", c, "test-domain", e("key3", "foo"), "test-domain.key3", "", nil},
		{"day", c, "test-domain", e("key4", "foo"), "test-domain.key4", "", nil},
		{"rule with children at last entry", c, "test-domain", e("key5", "value5"), "test-domain.key5_value5", "", nil},
		{"child of rule", c, "test-domain", e("key5", "value5", "subkey5", "subvalue5"), "test-domain.key5_value5.subkey5_subvalue5", "", nil},
		{"unlimited", c, "test-domain", e("key6", "foo"), "test-domain.key6", "", nil},
		{"detailed metric", c, "test-domain", e("key7", "unspecified_value"), "test-domain.key7", "test-domain.key7_unspecified_value", nil},
		{"detailed metric other value", c, "test-domain", e("key7", "another_value"), "test-domain.key7", "test-domain.key7_another_value", nil},
		{"empty request value uses key only", c, "test-domain", e("key2", ""), "test-domain.key2", "", nil},

		// wildcard.yaml
		{"no value baseline", wc, "test-domain", e("noVal", "foo1"), "test-domain.noVal", "", nil},
		{"wildcard", wc, "test-domain", e("wild", "foo1"), "test-domain.wild_foo*", "", nil},
		{"wildcard other value", wc, "test-domain", e("wild", "foo2"), "test-domain.wild_foo*", "", nil},
		{"wildcard empty run", wc, "test-domain", e("wild", "foo"), "test-domain.wild_foo*", "", nil},
		{"wildcard no match", wc, "test-domain", e("wild", "bar"), "", "", nil},
		{"no eager match", wc, "test-domain", e("noWild", "foo1"), "", "", nil},
		{"middle wildcard", wc, "test-domain", e("midWild", "barab"), "test-domain.midWild_bar*b", "", nil},
		{"middle wildcard literal", wc, "test-domain", e("midWild", "bar*b"), "test-domain.midWild_bar*b", "", nil},
		{"middle wildcard no match", wc, "test-domain", e("midWild", "barba"), "", "", nil},
		{"nested wildcard first in load order", wc, "test-domain", e("nested", "parent", "path", "/api/v1/x"), "test-domain.nested_parent.path_/api/*", "", nil},
		{"nested wildcard falls back to key", wc, "test-domain", e("nested", "parent", "path", "/other"), "test-domain.nested_parent.path", "", nil},
		{"leading wildcard", wc, "test-domain", e("host", "a.example.com"), "test-domain.host_*.example.com", "", nil},
		{"leading wildcard no match", wc, "test-domain", e("host", "example.com"), "", "", nil},
		{"wildcard parent", wc, "test-domain", e("wildparent", "wx", "child", "1"), "test-domain.wildparent_w*.child", "", nil},
		{"wildcard key must match", wc, "test-domain", e("wildX", "foo1"), "", "", nil},

		// share_threshold.yaml
		{"shared", st, "test-domain", e("files", "files/a.pdf"), "test-domain.files_files/*", "", e("files", "files/*")},
		{"shared nested", st, "test-domain", e("nested", "parent", "files", "nested/x"), "test-domain.nested_parent.files_nested/*", "", e("nested", "parent", "files", "nested/*")},
		{"shared both levels", st, "test-domain", e("files", "top/a", "files", "nested/b"), "test-domain.files_top/*.files_nested/*", "", e("files", "top/*", "files", "nested/*")},
		{"shared with value_to_metric", st, "test-domain", e("route", "api/v1", "method", "GET"), "test-domain.route_api/*.method", "", e("route", "api/*", "method", "GET")},
		{"shared with detailed_metric", st, "test-domain", e("service", "svc/a", "endpoint", "e1"), "test-domain.service_svc/*.endpoint", "test-domain.service_svc/*.endpoint_e1", e("service", "svc/*", "endpoint", "e1")},
		{"shared then not shared", st, "test-domain", e("path", "path/a", "file", "file/b", "type", "t"), "test-domain.path_path/*.file_file/*.type", "", e("path", "path/*", "file", "file/b", "type", "t")},
		{"shared twice then key", st, "test-domain", e("user", "user/1", "resource", "res/2", "action", "get"), "test-domain.user_user/*.resource_res/*.action", "", e("user", "user/*", "resource", "res/*", "action", "get")},
		{"explicit value before shared wildcard", st, "test-domain", e("file", "test1"), "test-domain.file_test1", "", nil},
		{"shared wildcard after explicit", st, "test-domain", e("file", "test2"), "test-domain.file_test*", "", e("file", "test*")},
		{"shared middle wildcard", st, "test-domain", e("midpath", "/api/foo/v1"), "test-domain.midpath_/api*v1", "", e("midpath", "/api*v1")},
		{"shared multi wildcard", st, "test-domain", e("multiroute", "svcAepBrpc"), "test-domain.multiroute_svc*ep*rpc", "", e("multiroute", "svc*ep*rpc")},
		{"shared multi wildcard no match", st, "test-domain", e("multiroute", "svcAepB"), "", "", nil},
		{"shared wins over value_to_metric", st, "test-domain", e("midroute", "/apiXv2"), "test-domain.midroute_/api*v2", "", e("midroute", "/api*v2")},
		{"shared nested middle wildcards", st, "test-domain", e("tenant", "t1prod", "resource", "resAv2"), "test-domain.tenant_t*prod.resource_res*v2", "", e("tenant", "t*prod", "resource", "res*v2")},

		// value_to_metric.yaml
		{"value_to_metric key only", vm, "v2m", e("route", "r1", "method", "GET"), "v2m.route.method", "v2m.route_r1.method", nil},
		{"value_to_metric wildcard", vm, "v2m", e("wild", "foo1"), "v2m.wild_foo*", "v2m.wild_foo1", nil},
		{"wildcard keeps pattern", vm, "v2m", e("plainwild", "foo1"), "v2m.plainwild_foo*", "", nil},
		{"value_to_metric exact", vm, "v2m", e("exact", "one"), "v2m.exact_one", "", nil},
		{"detailed path", vm, "v2m", e("detailed", "a", "leaf", "b"), "v2m.detailed.leaf", "v2m.detailed_a.leaf_b", nil},
		{"detailed empty value", vm, "v2m", e("detailed", "a", "leaf", ""), "v2m.detailed.leaf", "v2m.detailed_a.leaf_", nil},

		// examples/ratelimit/config/example.yaml
		{"example nested", ex, "rl", e("source_cluster", "proxy", "destination_cluster", "mock"), "rl.source_cluster_proxy.destination_cluster_mock", "", nil},
		{"example parent rule", ex, "rl", e("foo", "x"), "rl.foo", "", nil},
		{"example child", ex, "rl", e("foo", "x", "bar", "y"), "rl.foo.bar", "", nil},
		{"example banned", ex, "rl", e("foo", "x", "bar", "banned"), "rl.foo.bar_banned", "", nil},
		{"example shadow", ex, "rl", e("foo", "x", "baz", "shady"), "rl.foo.baz_shady", "", nil},
		{"example unlimited child", ex, "rl", e("foo", "x", "bay", "z"), "rl.foo.bay", "", nil},
		{"example too deep", ex, "rl", e("foo", "x", "bar", "y", "z", "w"), "", "", nil},
		{"example unlimited", ex, "rl", e("qux", "q"), "rl.qux", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, ok := tt.cfg.Match(tt.domain, tt.entries)
			if tt.fullKey == "" {
				if ok {
					t.Fatalf("Match(%q, %v) = %s, want no rule", tt.domain, tt.entries, m.Rule.FullKey)
				}
				return
			}
			if !ok {
				t.Fatalf("Match(%q, %v) found nothing, want %s", tt.domain, tt.entries, tt.fullKey)
			}
			if m.Rule.FullKey != tt.fullKey {
				t.Errorf("Match(%q, %v).Rule.FullKey = %s, want %s", tt.domain, tt.entries, m.Rule.FullKey, tt.fullKey)
			}
			wantMetric := tt.metric
			if wantMetric == "" {
				wantMetric = tt.fullKey
			}
			if m.MetricKey != wantMetric {
				t.Errorf("Match(%q, %v).MetricKey = %s, want %s", tt.domain, tt.entries, m.MetricKey, wantMetric)
			}
			wantEntries := tt.entries2
			if wantEntries == nil {
				wantEntries = tt.entries
				if &m.Entries[0] != &tt.entries[0] {
					t.Errorf("Match(%q, %v).Entries does not alias the input", tt.domain, tt.entries)
				}
			}
			if !reflect.DeepEqual(m.Entries, wantEntries) {
				t.Errorf("Match(%q, %v).Entries = %v, want %v", tt.domain, tt.entries, m.Entries, wantEntries)
			}
			if len(m.Rule.Levels) != len(tt.entries) {
				t.Errorf("Match(%q, %v).Rule.Levels has %d levels, want %d", tt.domain, tt.entries, len(m.Rule.Levels), len(tt.entries))
			}
		})
	}
}

func TestMatchFlags(t *testing.T) {
	c := mustParse(t, Options{}, "shadowmode_config.yaml")
	tests := []struct {
		entries []Entry
		shadow  bool
		rpu     uint64
	}{
		{e("key1", "value1", "subkey1", "something"), false, 5},
		{e("key1", "value1", "subkey1", "subvalue1"), true, 10},
		{e("key2", "something"), true, 20},
		{e("key2", "value2"), false, 30},
	}
	for _, tt := range tests {
		m, ok := c.Match("test-domain", tt.entries)
		if !ok || m.Rule.ShadowMode != tt.shadow || m.Rule.Limits[0].RequestsPerUnit != tt.rpu {
			t.Errorf("Match(%v) = %+v, %v; want shadow %v, %d per unit", tt.entries, m.Rule, ok, tt.shadow, tt.rpu)
		}
	}
}

func TestMergedDomainMatch(t *testing.T) {
	c := mustParse(t, Options{MergeDomains: true}, "merge_domain_key1.yaml", "merge_domain_key2.yaml")
	for _, tt := range []struct {
		entries []Entry
		rpu     uint64
	}{
		{e("key1", "value1"), 10},
		{e("key2", "value2"), 20},
	} {
		m, ok := c.Match("test-domain", tt.entries)
		if !ok || m.Rule.Limits[0].RequestsPerUnit != tt.rpu {
			t.Errorf("Match(%v) = %+v, %v; want %d per unit", tt.entries, m.Rule, ok, tt.rpu)
		}
	}
}

func TestMatchDoesNotAllocate(t *testing.T) {
	c := mustParse(t, Options{}, "basic_config.yaml")
	wc := mustParse(t, Options{}, "wildcard.yaml")
	tests := []struct {
		name    string
		cfg     *Config
		domain  string
		entries []Entry
	}{
		{"exact", c, "test-domain", e("key1", "value1", "subkey1", "subvalue1")},
		{"key only", c, "test-domain", e("key1", "value1", "subkey1", "something")},
		{"miss", c, "test-domain", e("nope", "x")},
		{"unknown domain", c, "nope", e("key1", "value1")},
		{"wildcard", wc, "test-domain", e("nested", "parent", "path", "/api/v1/x")},
	}
	for _, tt := range tests {
		allocs := testing.AllocsPerRun(100, func() {
			m, _ := tt.cfg.Match(tt.domain, tt.entries)
			_ = m
		})
		if allocs != 0 {
			t.Errorf("Match %s allocates %v times per call, want 0", tt.name, allocs)
		}
	}
}

func TestMatchConcurrent(t *testing.T) {
	c := mustParse(t, Options{}, "share_threshold.yaml")
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				m, ok := c.Match("test-domain", e("files", "files/x", "y", "z")[:1])
				if !ok || m.EntityID() != "files~files%2F*" {
					t.Errorf("Match = %+v, %v; want shared files bucket", m, ok)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func TestGlobMatch(t *testing.T) {
	tests := []struct {
		pattern, s string
		want       bool
	}{
		{"*", "", true},
		{"*", "anything", true},
		{"foo*", "foo", true},
		{"foo*", "fo", false},
		{"*bar", "foobar", true},
		{"*bar", "barfoo", false},
		{"a*b*c", "abc", true},
		{"a*b*c", "aXbYc", true},
		{"a*b*c", "aXbY", false},
		{"a**b", "ab", true},
		{"a*a*a*a*b", "aaaaaaaaaaaaaaaaaaaaaaaaaaaa", false},
		{"svc*ep*rpc", "svc-ep-ep-rpc", true},
		{"x", "x", true},
		{"x", "y", false},
	}
	for _, tt := range tests {
		if got := globMatch(tt.pattern, tt.s); got != tt.want {
			t.Errorf("globMatch(%q, %q) = %v, want %v", tt.pattern, tt.s, got, tt.want)
		}
	}
}
