package walkthrough

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dynalimit/dynalimit/internal/testutil"
)

// TestQuickStartSaysWhenItHolds: the quick start's 200 200 429 holds only
// within 20 s of its grpcurl call (a token refills every 20 s); the README
// says so right after the output.
func TestQuickStartSaysWhenItHolds(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(testutil.RepoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(readme), "\n200\n200\n429\n```\n")
	if !ok {
		t.Fatal("README.md: no quick start output 200 200 429")
	}
	next, _, _ := strings.Cut(strings.TrimSpace(after), "\n\n")
	if !strings.Contains(next, "within 20 s of the grpcurl call") {
		t.Errorf("README.md: the paragraph after the quick start's 200 200 429 = %q, want it to say it holds within 20 s of the grpcurl call", next)
	}
}
