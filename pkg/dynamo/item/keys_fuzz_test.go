package item

import (
	"strings"
	"testing"
)

// FuzzBucketPK: distinct (namespace, entity, resource, shard) tuples never
// share a bucket key (the empty namespace is "default"), escaped components
// never carry a separator, and keys stay within DynamoDB's 2048-byte limit.
func FuzzBucketPK(f *testing.F) {
	f.Add("", "a#b", "c", "", "a", "b#c", uint8(0), uint8(0))
	f.Add("x/BUCKET#y", "e", "r", "x", "y#e", "r", uint8(0), uint8(0))
	f.Add("", "%23", "r", "", "#", "r", uint8(1), uint8(1))
	f.Add("", "e", "r#0", "", "e#r", "0", uint8(0), uint8(0))
	f.Add("_", "SYSTEM", "r", "n_", "SYSTEM", "r", uint8(0), uint8(0))
	f.Add("", strings.Repeat("a", 2048), "r", "", "~"+strings.Repeat("0", 64), "r", uint8(0), uint8(0))
	f.Fuzz(func(t *testing.T, ns1, e1, r1, ns2, e2, r2 string, s1, s2 uint8) {
		if ns1 == "" {
			ns1 = "default"
		}
		if ns2 == "" {
			ns2 = "default"
		}
		k1 := BucketPK(ns1, e1, r1, int(s1))
		k2 := BucketPK(ns2, e2, r2, int(s2))
		same := ns1 == ns2 && e1 == e2 && r1 == r2 && s1 == s2
		if (k1 == k2) != same {
			t.Fatalf("bucketPK(%q, %q, %q, %d) = %q and bucketPK(%q, %q, %q, %d) = %q: equal %v, want %v",
				ns1, e1, r1, s1, k1, ns2, e2, r2, s2, k2, k1 == k2, same)
		}
		for _, c := range []string{ns1, e1, r1, ns2, e2, r2} {
			if e := Esc(c); strings.ContainsAny(e, "#/") || len(e) > MaxComponent+1 {
				t.Fatalf("esc(%q) = %q: carries a separator or is too long", c, e)
			}
		}
		if len(k1) > 2048 || len(k2) > 2048 {
			t.Fatalf("bucket keys of %d and %d bytes, want at most 2048", len(k1), len(k2))
		}
	})
}
