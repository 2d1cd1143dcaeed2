package descriptors

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// decodeEntityID inverts EntityID: decode(EntityID(m)) returns m's entries
// and which levels are shared, which proves the encoding injective.
func decodeEntityID(id string) ([]Entry, []bool, error) {
	if id == "" {
		return nil, nil, nil
	}
	var entries []Entry
	var shared []bool
	for _, part := range strings.Split(id, "&") {
		i := strings.IndexAny(part, "=~")
		if i < 0 {
			return nil, nil, errors.New("no separator")
		}
		k, err := unescape(part[:i])
		if err != nil {
			return nil, nil, err
		}
		v, err := unescape(part[i+1:])
		if err != nil {
			return nil, nil, err
		}
		entries = append(entries, Entry{k, v})
		shared = append(shared, part[i] == '~')
	}
	return entries, shared, nil
}

func unescape(s string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '%':
			if i+2 >= len(s) {
				return "", errors.New("short escape")
			}
			n, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
			if err != nil || strings.ToUpper(s[i+1:i+3]) != s[i+1:i+3] {
				return "", errors.New("bad escape")
			}
			b.WriteByte(byte(n))
			i += 2
		case mustEscape(c):
			return "", errors.New("unescaped reserved byte")
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}

func sharedRule(shared ...bool) *Rule {
	r := &Rule{}
	for _, s := range shared {
		r.Levels = append(r.Levels, Level{ShareThreshold: s})
	}
	return r
}

func TestEntityIDCollisions(t *testing.T) {
	plain := func(entries ...Entry) Match {
		return Match{Rule: sharedRule(make([]bool, len(entries))...), Entries: entries}
	}
	tests := []struct {
		name string
		a, b Match
	}{
		{"separator in value vs key", plain(Entry{"a", "b=c"}), plain(Entry{"a=b", "c"})},
		{"joined entries", plain(Entry{"a", "b&c=d"}), plain(Entry{"a", "b"}, Entry{"c", "d"})},
		{"shared pattern vs literal value", Match{Rule: sharedRule(true), Entries: []Entry{{"files", "files/*"}}}, plain(Entry{"files", "files/*"})},
		{"shared separator forged in value", Match{Rule: sharedRule(true), Entries: []Entry{{"k", "v"}}}, plain(Entry{"k~v", ""})},
		{"tilde in value", Match{Rule: sharedRule(true), Entries: []Entry{{"k", "x"}}}, plain(Entry{"k", "~x"})},
		{"escape lookalike", plain(Entry{"k", "%41"}), plain(Entry{"k", "A"})},
		{"invalid utf8 vs its escape", plain(Entry{"k", "\xff"}), plain(Entry{"k", "%FF"})},
		{"empty descriptor vs empty entry", plain(), plain(Entry{"", ""})},
		{"trailing empty entry", plain(Entry{"a", ""}), plain(Entry{"a", ""}, Entry{"", ""})},
		{"hash and slash", plain(Entry{"k", "a#b"}), plain(Entry{"k", "a/b"})},
		{"control bytes", plain(Entry{"k", "a\x00"}), plain(Entry{"k", "a"})},
		{"percent", plain(Entry{"k", "%"}), plain(Entry{"k", "%25"})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ida, idb := tt.a.EntityID(), tt.b.EntityID()
			if ida == idb {
				t.Errorf("EntityID(%v) = EntityID(%v) = %q, want distinct ids", tt.a.Entries, tt.b.Entries, ida)
			}
			for _, id := range []string{ida, idb} {
				if strings.ContainsAny(id, "#/") || !utf8.ValidString(id) {
					t.Errorf("EntityID = %q, want valid UTF-8 without '#' or '/'", id)
				}
			}
		})
	}
}

func TestEntityID(t *testing.T) {
	tests := []struct {
		m    Match
		want string
	}{
		{Match{Entries: []Entry{{"remote_address", "10.0.0.1"}}}, "remote_address=10.0.0.1"},
		{Match{Entries: []Entry{{"path", "/api/v1"}, {"user", "a&b"}}}, "path=%2Fapi%2Fv1&user=a%26b"},
		{Match{Rule: sharedRule(true, false), Entries: []Entry{{"files", "files/*"}, {"m", "GET"}}}, "files~files%2F*&m=GET"},
		{Match{Entries: []Entry{{"k", "é\xff\x7f\n"}}}, "k=é%FF%7F%0A"},
		{Match{}, ""},
	}
	for _, tt := range tests {
		if got := tt.m.EntityID(); got != tt.want {
			t.Errorf("EntityID(%v) = %q, want %q", tt.m.Entries, got, tt.want)
		}
	}
}

func FuzzEntityID(f *testing.F) {
	f.Add("a", "b=c", "a=b", "c", false, false)
	f.Add("files", "files/*", "k", "%41", true, false)
	f.Add("k", "\xff~&#/", "", "", false, true)
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string, s1, s2 bool) {
		for _, m := range []Match{
			{Rule: sharedRule(s1), Entries: []Entry{{k1, v1}}},
			{Rule: sharedRule(s1, s2), Entries: []Entry{{k1, v1}, {k2, v2}}},
		} {
			id := m.EntityID()
			if strings.ContainsAny(id, "#/") || !utf8.ValidString(id) {
				t.Fatalf("EntityID(%q) = %q, want valid UTF-8 without '#' or '/'", m.Entries, id)
			}
			entries, shared, err := decodeEntityID(id)
			if err != nil {
				t.Fatalf("decode(EntityID(%q) = %q): %v", m.Entries, id, err)
			}
			if len(entries) != len(m.Entries) {
				t.Fatalf("decode(%q) = %q, want %q", id, entries, m.Entries)
			}
			for i := range entries {
				if entries[i] != m.Entries[i] || shared[i] != m.Rule.Levels[i].ShareThreshold {
					t.Fatalf("decode(%q) = %q %v, want %q", id, entries, shared, m.Entries)
				}
			}
		}
	})
}

func TestNeedsEscape(t *testing.T) {
	for _, s := range []string{"", "key-1", "acme.corp_2", "é", "日本", "a=b", "é=", "org/team", "50%", "a\x00", "\xff", "é\xff", "a~b", "a#b", "a&b", "\x7f"} {
		if got, want := needsEscape(s), EscapeValue(s) != s; got != want {
			t.Errorf("needsEscape(%q) = %t, want %t", s, got, want)
		}
	}
}
