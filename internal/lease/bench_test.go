package lease

import (
	"testing"
)

// TestTokenSize measures the token of the shape: a three-level
// chain (key → project → tenant), two limits a level, realistic names.
func TestTokenSize(t *testing.T) {
	k := mustKeyring(t, keyA)
	l := chainLease(t)
	tok := mustSign(t, k, l)
	raw := len(tok) * 6 / 8
	t.Logf("three-level chain, two limits a level: %d characters (%d bytes before base64)", len(tok), raw)
	// Without the string table the names would take 3×(7+6) more bytes for
	// namespace and resource alone, and 2 more per limit name.
	if len(tok) > 240 {
		t.Errorf("token of %d characters, want at most 240", len(tok))
	}
}

// leases are the chain's lease without money (version 1) and with a
// budget in dollars on every level (version 2).
func leases(b *testing.B) map[string]*Lease {
	return map[string]*Lease{"tokens": chainLease(b), "money": moneyLease(b)}
}

func BenchmarkSign(b *testing.B) {
	k := mustKeyring(b, keyA)
	for _, name := range []string{"tokens", "money"} {
		l := leases(b)[name]
		b.Run(name, func(b *testing.B) {
			var tok string
			b.ReportAllocs()
			for b.Loop() {
				tok = mustSign(b, k, l)
			}
			b.ReportMetric(float64(len(tok)), "token-chars")
		})
	}
}

func BenchmarkVerify(b *testing.B) {
	k := mustKeyring(b, keyA, keyB)
	for _, name := range []string{"tokens", "money"} {
		tok := mustSign(b, k, leases(b)[name])
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := k.Verify(tok, t0); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(tok)), "token-chars")
		})
	}
}

func BenchmarkVerifyForged(b *testing.B) {
	k := mustKeyring(b, keyA)
	tok := mustSign(b, k, chainLease(b))
	forged := tok[:40] + string('A'+(tok[40]-'A'+1)%26) + tok[41:]
	b.ReportAllocs()
	for b.Loop() {
		if _, err := k.Verify(forged, t0); err == nil {
			b.Fatal("forged token accepted")
		}
	}
}

func BenchmarkNewID(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = NewID()
	}
}
