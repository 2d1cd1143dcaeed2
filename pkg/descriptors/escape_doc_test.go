package descriptors

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// escapedList is how the documentation lists the bytes an entity id
// escapes: the printable ones in backquotes, then control bytes and bytes
// that are not valid UTF-8.
var escapedList = regexp.MustCompile("^((?:`[^`]+`,\\s+)+)control\\s+bytes\\s+(?:and|or)\\s+bytes\\s+that\\s+are\\s+not\\s+valid\\s+UTF-8")

// TestDocsListEscapedBytes: every list of the escaped bytes in README.md
// and docs/*.md (each starts "`%`, ") names exactly the printable bytes
// EscapeValue escapes, then control bytes and invalid UTF-8, which it
// escapes too.
func TestDocsListEscapedBytes(t *testing.T) {
	var printable []string
	for c := byte(0x20); c < 0x7f; c++ {
		if EscapeValue(string(c)) != string(c) {
			printable = append(printable, string(c))
		}
	}
	for c := byte(0); c < 0x20; c++ {
		if got := EscapeValue(string(c)); got == string(c) {
			t.Errorf("EscapeValue(%q) = %q, want it escaped (a control byte)", c, got)
		}
	}
	for _, s := range []string{"\x7f", "\xff", "\xc3"} {
		if got := EscapeValue(s); got == s {
			t.Errorf("EscapeValue(%q) = %q, want it escaped", s, got)
		}
	}
	if got := EscapeValue("é"); got != "é" || !utf8.ValidString(got) {
		t.Errorf(`EscapeValue("é") = %q, want it as it is (valid UTF-8)`, got)
	}
	slices.Sort(printable)

	root := filepath.Join("..", "..")
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, filepath.Join(root, "README.md"))
	lists := 0
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		doc := string(b)
		for i := 0; ; {
			j := strings.Index(doc[i:], "`%`, ")
			if j < 0 {
				break
			}
			i += j
			line := strings.Count(doc[:i], "\n") + 1
			m := escapedList.FindStringSubmatch(doc[i:])
			i++
			if m == nil {
				t.Errorf("%s:%d: a list of escaped bytes that does not end \"control bytes and bytes that are not valid UTF-8\"", page, line)
				continue
			}
			lists++
			var named []string
			for _, f := range strings.Split(m[1], ",") {
				if f = strings.Trim(strings.TrimSpace(f), "`"); f != "" {
					named = append(named, f)
				}
			}
			slices.Sort(named)
			if !slices.Equal(named, printable) {
				t.Errorf("%s:%d: lists the escaped bytes %q, but EscapeValue escapes %q", page, line, named, printable)
			}
		}
	}
	// README.md, docs/dynamodb.md (twice), docs/hierarchies.md, docs/cli.md.
	if lists < 5 {
		t.Errorf("found %d lists of the escaped bytes in the documentation, want at least 5", lists)
	}
}
