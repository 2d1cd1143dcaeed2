package admin

import (
	"strings"
	"testing"
	"time"
)

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
	id := newULID(time.UnixMilli(ms))
	if len(id) != 26 || id[:10] != string(want[:]) {
		t.Errorf("newULID(%d ms) = %q, want 26 characters beginning %q", ms, id, want)
	}
	for i := range len(id) {
		if !strings.ContainsRune(alphabet, rune(id[i])) {
			t.Errorf("newULID() = %q: character %d not of the alphabet", id, i)
		}
	}
}
