package main

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/dynalimit/dynalimit/internal/config"
)

var update = flag.Bool("update", false, "rewrite the generated parts of docs/")

// generated keeps the part of docs/name between the markers start and end
// identical to want; with -update it rewrites the part instead of failing.
func generated(t *testing.T, name, start, end, want string) {
	t.Helper()
	path := filepath.Join("..", "..", "docs", name)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i, j := strings.Index(doc, start), strings.Index(doc, end)
	if i < 0 || j < i {
		t.Fatalf("%s lacks the %q … %q markers", path, start, end)
	}
	if got := doc[i+len(start) : j]; got != want {
		if *update {
			doc = doc[:i+len(start)] + want + doc[j:]
			if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		t.Errorf("%s is stale between %q and %q; run: go test ./cmd/ratelimit -run 'README|Docs' -update\ngot:\n%s\nwant:\n%s", path, start, end, got, want)
	}
}

// TestREADMESettingsTable keeps the settings table of docs/settings.md
// identical to the settings the binary reads. Run
// `go test ./cmd/ratelimit -run README -update` after changing a setting.
func TestREADMESettingsTable(t *testing.T) {
	generated(t, "settings.md", "<!-- settings-table:start -->\n", "<!-- settings-table:end -->", config.MarkdownTable())
}

// TestDocsLinks checks every relative link of README.md, BENCHMARKS.md and
// docs/*.md: the file it names exists and, when it names an anchor, a
// heading of that file makes it (GitHub's rule: lower case, punctuation
// other than '-' and '_' dropped, spaces to '-').
func TestDocsLinks(t *testing.T) {
	root := filepath.Join("..", "..")
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, filepath.Join(root, "README.md"), filepath.Join(root, "BENCHMARKS.md"))
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(b), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			path := page
			if file != "" {
				path = filepath.Join(filepath.Dir(page), file)
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s: link %s: %v", page, target, err)
					continue
				}
			}
			if anchor != "" && !slices.Contains(anchors(t, path), anchor) {
				t.Errorf("%s: link %s: no heading makes #%s", page, target, anchor)
			}
		}
	}
}

// anchors lists the anchors GitHub makes of a Markdown file's headings.
func anchors(t *testing.T, path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	inCode := false
	for line := range strings.Lines(string(b)) {
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
		}
		if inCode || !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#")))
		var a strings.Builder
		for _, r := range h {
			switch {
			case r == ' ':
				a.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				a.WriteRune(r)
			}
		}
		out = append(out, a.String())
	}
	return out
}

// TestDocsCommandList keeps the command list of docs/cli.md identical to what
// `ratelimit -h` prints.
func TestDocsCommandList(t *testing.T) {
	var stdout, stderr strings.Builder
	if code := Main(t.Context(), []string{"-h"}, func(string) string { return "" }, &stdout, &stderr); code != 0 {
		t.Fatalf("Main(-h) = %d, want 0 (stderr %q)", code, stderr.String())
	}
	generated(t, "cli.md", "<!-- command-list:start -->\n```\n$ ratelimit -h\n", "```\n<!-- command-list:end -->", stdout.String())
}
