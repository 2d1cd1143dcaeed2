package descriptors

import (
	"strings"
	"unicode/utf8"
)

// EntityID returns the canonical encoding of m.Entries: "key=value" pairs
// joined by '&', where a share_threshold level is written "key~pattern"
// instead. In keys, values and patterns the bytes '%', '=', '&', '#', '/',
// '~', control bytes (below 0x20 and 0x7f) and bytes that are not part of
// valid UTF-8 are written as %XX (upper-case hex).
//
// The encoding is injective: every escaped byte becomes a '%' sequence, so
// the separators '=', '~' and '&' in the output only ever separate, and no
// request value can forge or collide with another bucket — in particular not
// with a shared wildcard bucket, whose separator '~' a literal value cannot
// produce. The id contains neither '#' nor '/', so stores can embed it in
// composite keys.
func (m Match) EntityID() string {
	var b strings.Builder
	n := 0
	for _, e := range m.Entries {
		n += len(e.Key) + len(e.Value) + 2
	}
	b.Grow(n)
	for i, e := range m.Entries {
		if i > 0 {
			b.WriteByte('&')
		}
		escapeTo(&b, e.Key)
		if m.Rule != nil && i < len(m.Rule.Levels) && m.Rule.Levels[i].ShareThreshold {
			b.WriteByte('~')
		} else {
			b.WriteByte('=')
		}
		escapeTo(&b, e.Value)
	}
	return b.String()
}

const upperHex = "0123456789ABCDEF"

// needsEscape reports whether escapeTo would change s.
func needsEscape(s string) bool {
	ascii := true
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= utf8.RuneSelf {
			ascii = false
			continue
		}
		if mustEscape(c) {
			return true
		}
	}
	return !ascii && !utf8.ValidString(s)
}

func mustEscape(c byte) bool {
	switch c {
	case '%', '=', '&', '#', '/', '~', 0x7f:
		return true
	}
	return c < 0x20
}

func escapeTo(b *strings.Builder, s string) {
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				b.WriteByte('%')
				b.WriteByte(upperHex[c>>4])
				b.WriteByte(upperHex[c&15])
			} else {
				b.WriteString(s[i : i+size])
			}
			i += size
			continue
		}
		if mustEscape(c) {
			b.WriteByte('%')
			b.WriteByte(upperHex[c>>4])
			b.WriteByte(upperHex[c&15])
		} else {
			b.WriteByte(c)
		}
		i++
	}
}

// globMatch reports whether s matches pattern, where each '*' matches any
// run of bytes (possibly empty) and every other byte matches itself. It runs
// in O(len(pattern)·len(s)) at worst and does not allocate.
func globMatch(pattern, s string) bool {
	p, i := 0, 0
	star, mark := -1, 0
	for i < len(s) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, i
			p++
		case p < len(pattern) && pattern[p] == s[i]:
			p++
			i++
		case star >= 0:
			p = star + 1
			mark++
			i = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// EscapeValue returns s as entity ids write a request value: the bytes '%',
// '=', '&', '#', '/', '~', control bytes and bytes that are not valid UTF-8
// as %XX, everything else as it is. A hierarchical rule names an entity by
// its value so escaped (Tier.Entity), so a stored entity record names an
// entity whose value holds such bytes in this form.
func EscapeValue(s string) string {
	var b strings.Builder
	escapeTo(&b, s)
	return b.String()
}
