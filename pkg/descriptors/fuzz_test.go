package descriptors

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse feeds arbitrary YAML to Parse: it must never panic, and a
// config it accepts must be usable.
func FuzzParse(f *testing.F) {
	paths, _ := filepath.Glob("testdata/*.yaml")
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("a: &a [*a, *a]\nb: *a\n"))
	f.Add([]byte("domain: d\ndescriptors:\n  - <<: {key: k}\n    rate_limit: {unit: second, requests_per_unit: 1}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse([]File{{Name: "f.yaml", Data: data}}, Options{MergeDomains: true})
		if err != nil {
			if c != nil {
				t.Fatalf("Parse returned both a config and %v", err)
			}
			return
		}
		_ = c.Dump()
		for _, r := range c.Rules() {
			if len(r.Levels) == 0 || r.FullKey == "" || !c.HasDomain(r.Domain) {
				t.Fatalf("rule %+v is incomplete", r)
			}
			for _, l := range r.Limits {
				if l.ID == "" || l.UnitMultiplier < 1 || (!l.Deny && l.Bucket.Capacity <= 0) {
					t.Fatalf("rule %s has an invalid limit %+v", r.FullKey, l)
				}
			}
		}
	})
}

// FuzzMatch matches arbitrary descriptors: no panic, and a match is
// consistent (one level per entry, an entity id that decodes back).
func FuzzMatch(f *testing.F) {
	var files []File
	for _, n := range []string{"basic_config.yaml", "share_threshold.yaml", "value_to_metric.yaml"} {
		data, err := os.ReadFile(filepath.Join("testdata", n))
		if err != nil {
			f.Fatal(err)
		}
		files = append(files, File{Name: n, Data: data})
	}
	c, err := Parse(files, Options{MergeDomains: true})
	if err != nil {
		f.Fatal(err)
	}
	f.Add("test-domain", "files", "files/a", "", "", 1)
	f.Add("test-domain", "key1", "value1", "subkey1", "x", 2)
	f.Add("v2m", "route", "r", "method", "GET", 2)
	f.Add("test-domain", "tenant", "t1prod", "resource", "res-v2", 2)
	f.Fuzz(func(t *testing.T, domain, k1, v1, k2, v2 string, n int) {
		entries := []Entry{{k1, v1}, {k2, v2}}
		if n%2 != 0 {
			entries = entries[:1]
		}
		m, ok := c.Match(domain, entries)
		if !ok {
			return
		}
		if len(m.Entries) != len(entries) || len(m.Rule.Levels) != len(entries) || m.MetricKey == "" {
			t.Fatalf("Match(%q, %q) = %+v, inconsistent", domain, entries, m)
		}
		got, shared, err := decodeEntityID(m.EntityID())
		if err != nil || len(got) != len(m.Entries) {
			t.Fatalf("decode(%q) = %q, %v", m.EntityID(), got, err)
		}
		for i := range got {
			if got[i] != m.Entries[i] || shared[i] != m.Rule.Levels[i].ShareThreshold {
				t.Fatalf("decode(%q) = %q, want %q", m.EntityID(), got, m.Entries)
			}
			if m.Entries[i].Key != entries[i].Key {
				t.Fatalf("Match changed key %q to %q", entries[i].Key, m.Entries[i].Key)
			}
		}
	})
}
