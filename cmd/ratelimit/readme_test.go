package main

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dynalimit/dynalimit/internal/config"
)

var update = flag.Bool("update", false, "rewrite the generated parts of README.md")

// TestREADMESettingsTable keeps the README's settings table identical to the
// settings the binary reads. Run `go test ./cmd/ratelimit -run README -update`
// after changing a setting.
func TestREADMESettingsTable(t *testing.T) {
	path := filepath.Join("..", "..", "README.md")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const start, end = "<!-- settings-table:start -->\n", "<!-- settings-table:end -->"
	readme := string(b)
	i, j := strings.Index(readme, start), strings.Index(readme, end)
	if i < 0 || j < i {
		t.Fatalf("README.md lacks the %q … %q markers", start, end)
	}
	want := config.MarkdownTable()
	if got := readme[i+len(start) : j]; got != want {
		if *update {
			readme = readme[:i+len(start)] + want + readme[j:]
			if err := os.WriteFile(path, []byte(readme), 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		t.Errorf("README.md settings table is stale; run: go test ./cmd/ratelimit -run README -update")
	}
}
