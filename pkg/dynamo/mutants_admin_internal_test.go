package dynamo

import (
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/dynalimit/dynalimit/pkg/dynamo/item"
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
		if got, ok := requestForm(c.id); got != c.want || ok != c.ok {
			t.Errorf("requestForm(%q) = %q, %t, want %q, %t", c.id, got, ok, c.want, c.ok)
		}
	}
}

// TestEntityString: no record is the empty string.
func TestEntityString(t *testing.T) {
	if got := entityString(Entity{}); got != "" {
		t.Errorf("entityString(none) = %q, want empty", got)
	}
	if got := entityString(Entity{ID: "a", Parent: "b"}); got != `id="a" parent="b" cascade=false` {
		t.Errorf("entityString(a) = %q", got)
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

// TestNamespaceOfAndName: a registry record without a change time has none;
// one with it, that instant; a key prefix names its namespace unescaped, or
// as it is when it does not unescape.
func TestNamespaceOfAndName(t *testing.T) {
	if ns := namespaceOf(map[string]types.AttributeValue{"name": item.StrAV("a")}); !ns.Changed.IsZero() || ns.State != NamespaceActive {
		t.Errorf("namespaceOf(no change) = %+v, want active and no change time", ns)
	}
	if ns := namespaceOf(map[string]types.AttributeValue{"name": item.StrAV("a"), attrChangedAt: item.NumAV(1234)}); !ns.Changed.Equal(time.UnixMilli(1234)) {
		t.Errorf("namespaceOf(changed at 1234) = %+v", ns)
	}
	for in, want := range map[string]string{"nteam%2Fa": "team/a", "n%zz": "%zz", "nplain": "plain"} {
		if got := namespaceName(in); got != want {
			t.Errorf("namespaceName(%q) = %q, want %q", in, got, want)
		}
	}
}
