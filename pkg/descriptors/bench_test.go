package descriptors

import "testing"

func BenchmarkMatch(b *testing.B) {
	basic := mustParse(b, Options{}, "basic_config.yaml")
	wild := mustParse(b, Options{}, "wildcard.yaml")
	shared := mustParse(b, Options{}, "share_threshold.yaml")
	v2m := mustParse(b, Options{}, "value_to_metric.yaml")
	cases := []struct {
		name    string
		cfg     *Config
		domain  string
		entries []Entry
	}{
		{"exact", basic, "test-domain", e("key1", "value1", "subkey1", "subvalue1")},
		{"key_only", basic, "test-domain", e("key1", "value1", "subkey1", "something")},
		{"miss", basic, "test-domain", e("key9", "x")},
		{"wildcard", wild, "test-domain", e("nested", "parent", "path", "/api/v1/users/42")},
		{"shared_wildcard", shared, "test-domain", e("files", "files/a.pdf")},
		{"value_to_metric", v2m, "v2m", e("route", "r1", "method", "GET")},
	}
	for _, bc := range cases {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, ok := bc.cfg.Match(bc.domain, bc.entries); !ok && bc.name != "miss" {
					b.Fatal("no match")
				}
			}
		})
	}
}

func BenchmarkEntityID(b *testing.B) {
	c := mustParse(b, Options{}, "basic_config.yaml")
	m, _ := c.Match("test-domain", e("key1", "value1", "subkey1", "some/value"))
	b.ReportAllocs()
	for b.Loop() {
		_ = m.EntityID()
	}
}

func BenchmarkParse(b *testing.B) {
	f := readFile(b, "share_threshold.yaml")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse([]File{f}, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}
