package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// Binary builds ./cmd/ratelimit once per test binary and returns its path.
// It skips t under -short (the fast loop builds no binary).
func Binary(t testing.TB) string {
	t.Helper()
	return Build(t, "./cmd/ratelimit")
}

type build struct {
	once sync.Once
	bin  string
	err  error
}

var (
	buildsMu sync.Mutex
	builds   = map[string]*build{}
)

// Build builds the main package pkg of the repository (e.g.
// ./internal/bench/trivialrls) once per test binary and returns the
// binary's path. It skips t under -short (the fast loop builds no binary).
func Build(t testing.TB, pkg string) string {
	t.Helper()
	if testing.Short() {
		t.Skipf("testutil: needs the binary built from %s, which -short does not build", pkg)
	}
	buildsMu.Lock()
	b := builds[pkg]
	if b == nil {
		b = &build{}
		builds[pkg] = b
	}
	buildsMu.Unlock()
	b.once.Do(func() { b.bin, b.err = buildCommand(pkg) })
	if b.err != nil {
		t.Fatalf("testutil: %v", b.err)
	}
	return b.bin
}

// buildCommand builds the main package pkg of the repository into a
// temporary directory and returns the binary's path.
func buildCommand(pkg string) (string, error) {
	root, err := FindRepoRoot()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "testutil-"+filepath.Base(pkg)+"-")
	if err != nil {
		return "", fmt.Errorf("testutil: %w", err)
	}
	bin := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
	}
	return bin, nil
}
