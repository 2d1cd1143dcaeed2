package redisstore_test

import (
	"strings"
	"testing"

	"github.com/dynalimit/dynalimit/internal/redisstore"
	"github.com/dynalimit/dynalimit/pkg/cascade"
)

// TestSlotOf: CRC16 is Redis Cluster's (the specification's check value),
// and a key's slot is its hash tag's.
func TestSlotOf(t *testing.T) {
	if got := redisstore.Crc16("123456789"); got != 0x31C3 {
		t.Errorf("crc16(123456789) = %#x, want 0x31c3", got)
	}
	for _, c := range []struct {
		key  string
		slot uint16
	}{
		{"foo", 12182}, {"{user1000}.following", 3443}, {"{user1000}.followers", 3443}, {"foo{}{bar}", 8363}, {"{}", 15257},
	} {
		if got := redisstore.SlotOf(c.key); got != c.slot {
			t.Errorf("slot(%q) = %d, want %d", c.key, got, c.slot)
		}
	}
}

// FuzzBucketKey: two bucket keys are equal only when namespace, entity and
// resource all are, whatever bytes they hold, and a key's only braces are
// its hash tag's.
func FuzzBucketKey(f *testing.F) {
	f.Add("", "a", "b", "", "a", "b")
	f.Add("ns", "a:1", "b", "ns", "a", "1:b")
	f.Add("", "{x}", "%7B", "", "%7B", "{x}")
	f.Add("n}s", "", "", "n", "}s", "")
	f.Fuzz(func(t *testing.T, ns1, e1, r1, ns2, e2, r2 string) {
		k1 := redisstore.BucketKey("dep", cascade.Key{Namespace: ns1, Entity: e1, Resource: r1})
		k2 := redisstore.BucketKey("dep", cascade.Key{Namespace: ns2, Entity: e2, Resource: r2})
		same := (ns1 == ns2 || (ns1 == "" && ns2 == "dep") || (ns1 == "dep" && ns2 == "")) && e1 == e2 && r1 == r2
		if (k1 == k2) != same {
			t.Errorf("keys %q and %q: equal %v, want %v", k1, k2, k1 == k2, same)
		}
		for _, k := range []string{k1, k2} {
			if strings.Count(k, "{") != 1 || strings.Count(k, "}") != 1 || !strings.HasPrefix(k, redisstore.Prefix) {
				t.Fatalf("key %q: want the prefix and one hash tag, its only braces", k)
			}
		}
	})
}
