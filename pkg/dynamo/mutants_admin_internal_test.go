package dynamo

import (
	"strings"
	"testing"
	"time"
)

// TestRequestForm: %XX sequences are decoded where well formed (a 0 digit
// in either place too) and escaped again; a % too near the end stays a
// byte.
func TestRequestForm(t *testing.T) {
	for _, c := range []struct {
		id, want string
		ok       bool
	}{
		{"%0A", "%0A", true},
		{"%30", "0", false},
		{"a%4", "a%254", false},
		{"org/team", "org%2Fteam", false},
	} {
		if got, ok := RequestForm(c.id); got != c.want || ok != c.ok {
			t.Errorf("requestForm(%q) = %q, %t, want %q, %t", c.id, got, ok, c.want, c.ok)
		}
	}
}

// TestULIDTime: a ULID's first 10 characters are its millisecond time in
// Crockford base32, and every character is of that alphabet.
func TestULIDTime(t *testing.T) {
	const alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
	ms := int64(0xABCDEF012345)
	var want [10]byte
	for i, v := 9, ms; i >= 0; i-- {
		want[i] = alphabet[v&31]
		v >>= 5
	}
	id := NewULID(time.UnixMilli(ms))
	if len(id) != 26 || id[:10] != string(want[:]) {
		t.Errorf("newULID(%d ms) = %q, want 26 characters beginning %q", ms, id, want)
	}
	for i := range len(id) {
		if !strings.ContainsRune(alphabet, rune(id[i])) {
			t.Errorf("newULID() = %q: character %d not of the alphabet", id, i)
		}
	}
}
