package descriptors

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatalf("symlink: %v", err)
	}
}

func domainFile(domain string) string {
	return "domain: " + domain + "\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n"
}

func TestLoadDir(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), domainFile("a"))
	writeFile(t, filepath.Join(dir, "sub", "b.yml"), domainFile("b"))
	writeFile(t, filepath.Join(dir, "sub", "deeper", "c.conf"), domainFile("c")) // any extension
	writeFile(t, filepath.Join(dir, ".hidden.yaml"), domainFile("hidden"))
	writeFile(t, filepath.Join(dir, ".hiddendir", "h.yaml"), domainFile("hiddendir"))
	// Kubernetes ConfigMap volume: files are symlinks through ..data into a
	// timestamped ..2024_* directory, which is never read directly.
	writeFile(t, filepath.Join(dir, "..2024_01_01", "cm.yaml"), domainFile("cm"))
	symlink(t, "..2024_01_01", filepath.Join(dir, "..data"))
	symlink(t, filepath.Join("..data", "cm.yaml"), filepath.Join(dir, "cm.yaml"))
	// A symlinked directory and a loop back to the root.
	other := t.TempDir()
	writeFile(t, filepath.Join(other, "d.yaml"), domainFile("d"))
	symlink(t, other, filepath.Join(dir, "linked"))
	symlink(t, dir, filepath.Join(dir, "sub", "loop"))

	tests := []struct {
		name string
		opts Options
		want []string
	}{
		{"all files", Options{}, []string{"a", "b", "c", "cm", "d", "hidden", "hiddendir"}},
		{"ignore dot files", Options{IgnoreDotFiles: true}, []string{"a", "b", "c", "cm", "d"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := LoadDir(dir, tt.opts)
			if err != nil {
				t.Fatalf("LoadDir(%+v) = %v", tt.opts, err)
			}
			if got := c.Domains(); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("LoadDir(%+v).Domains() = %v, want %v", tt.opts, got, tt.want)
			}
		})
	}
}

func TestLoadDirOrder(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "b.yaml"), domainFile("x"))
	writeFile(t, filepath.Join(dir, "a", "z.yaml"), domainFile("x"))
	writeFile(t, filepath.Join(dir, "a-c.yaml"), domainFile("x"))
	_, err := LoadDir(dir, Options{})
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("LoadDir = %v, want duplicate domain errors", err)
	}
	var files []string
	for _, p := range e.Problems {
		files = append(files, strings.TrimPrefix(p.File, dir+string(filepath.Separator)))
	}
	// Sorted paths: "a-c.yaml" < "a/z.yaml" < "b.yaml"; the first loads.
	if want := []string{"a/z.yaml", "b.yaml"}; !reflect.DeepEqual(files, want) {
		t.Errorf("problem files = %v, want %v (sorted path order)", files, want)
	}
}

func TestLoadDirErrors(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "bad.yaml"), "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: foo\n")
	_, err := LoadDir(dir, Options{})
	want := filepath.Join(dir, "bad.yaml") + ":5: unit: invalid rate limit unit 'foo'"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("LoadDir = %v, want error containing %q", err, want)
	}

	dangling := t.TempDir()
	symlink(t, "missing.yaml", filepath.Join(dangling, "x.yaml"))
	_, err = LoadDir(dangling, Options{})
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dangling, "x.yaml")) {
		t.Errorf("LoadDir(dangling symlink) = %v, want an error naming the file", err)
	}

	_, err = LoadDir(filepath.Join(dir, "nope"), Options{})
	if err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("LoadDir(missing dir) = %v, want an error naming it", err)
	}

	c, err := LoadDir(t.TempDir(), Options{})
	if err != nil || len(c.Domains()) != 0 {
		t.Errorf("LoadDir(empty) = %v, %v; want an empty config", c, err)
	}
}

// TestLoadDirEnvoyBootstraps loads the repository's examples/envoy, where
// Envoy bootstraps sit beside the descriptor directory: one problem per
// bootstrap, each pointing at the descriptor files, and DescriptorDir
// naming them.
func TestLoadDirEnvoyBootstraps(t *testing.T) {
	dir := filepath.Join("..", "..", "examples", "envoy")
	bootstraps, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(bootstraps) == 0 {
		t.Fatalf("Glob(%s/*.yaml) = %v, %v, want the example bootstraps", dir, bootstraps, err)
	}
	_, err = LoadDir(dir, Options{})
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("LoadDir(%s) = %v, want *Error", dir, err)
	}
	if len(e.Problems) != len(bootstraps) {
		t.Errorf("LoadDir(%s) = %d problems, want one per bootstrap (%d):\n%v", dir, len(e.Problems), len(bootstraps), err)
	}
	wantDir := filepath.Join(dir, "config")
	for i, p := range e.Problems {
		if i < len(bootstraps) && p.File != bootstraps[i] {
			t.Errorf("problem %d names %s, want %s", i, p.File, bootstraps[i])
		}
		want := "not a descriptor file; descriptor files have 'domain:' and 'descriptors:' (the descriptor files here are in " + wantDir + ")"
		if !strings.HasPrefix(p.Msg, "this is an Envoy bootstrap (top-level ") || !strings.HasSuffix(p.Msg, want) {
			t.Errorf("problem %d = %q, want an Envoy bootstrap problem ending %q", i, p.Msg, want)
		}
	}
	if got := e.DescriptorDir(); got != wantDir {
		t.Errorf("DescriptorDir() = %q, want %q", got, wantDir)
	}

	// A file with a domain is a descriptor file whatever else it has: its
	// problems are the usual ones.
	tmp := t.TempDir()
	writeFile(t, filepath.Join(tmp, "typo.yaml"), "domain: d\nadmin: {}\n")
	_, err = LoadDir(tmp, Options{})
	if err == nil || strings.Contains(err.Error(), "Envoy bootstrap") || !strings.Contains(err.Error(), "unknown key 'admin'") {
		t.Errorf("LoadDir(domain + admin) = %v, want the unknown key, not a bootstrap", err)
	}
	if !errors.As(err, &e) || e.DescriptorDir() != "" {
		t.Errorf("DescriptorDir() without bootstraps = %q, want empty", e.DescriptorDir())
	}
}
