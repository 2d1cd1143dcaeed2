package conformance

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/dynalimit/dynalimit/internal/testutil"
)

// h2spec's module, pinned by version and by the checksum the module proxy
// and sum.golang.org hold for it.
const (
	h2specModule  = "github.com/summerwind/h2spec"
	h2specVersion = "v2.2.1+incompatible"
	h2specSum     = "h1:Ex8kpG4LjIeudEtfbM892Os2PawIZBsEvukHJcvZHho="
)

// h2spec v2.2.1 predates modules: testdata/h2spec.mod and h2spec.sum are
// what `go mod init github.com/summerwind/h2spec && go mod tidy` picked in a
// copy of it, kept so that every build resolves the same dependencies.
// Regenerate them with
//
//	go test ./internal/conformance -run TestH2spec -update-h2spec-mod
var updateH2specMod = flag.Bool("update-h2spec-mod", false, "regenerate testdata/h2spec.mod and h2spec.sum with go mod init and go mod tidy in h2spec's copy")

// h2specPatches make h2spec's requests gRPC calls: its CommonHeaders are a
// GET, which a gRPC server refuses by design, so every case would test the
// refusal rather than the frames around it.
var h2specPatches = []struct{ file, old, new string }{
	{
		file: "spec/util.go",
		old:  `HeaderField(":method", "GET"),`,
		new:  `HeaderField(":method", "POST"),`,
	},
	{
		file: "spec/util.go",
		old:  "HeaderField(\":authority\", authority),\n\t}",
		new: "HeaderField(\":authority\", authority),\n" +
			"\t\tHeaderField(\"content-type\", \"application/grpc\"),\n" +
			"\t\tHeaderField(\"te\", \"trailers\"),\n\t}",
	},
}

var h2specBuild struct {
	once sync.Once
	bin  string
	err  error
}

// h2specBinary builds h2spec once per test binary and returns its path.
func h2specBinary() (string, error) {
	h2specBuild.once.Do(func() { h2specBuild.bin, h2specBuild.err = buildH2spec() })
	return h2specBuild.bin, h2specBuild.err
}

// buildH2spec copies h2spec's module from the module cache into
// .cache/h2spec/src at the repository root, gives it the pinned go.mod and
// go.sum, patches its requests and builds .cache/h2spec/h2spec.
func buildH2spec() (string, error) {
	root, err := testutil.FindRepoRoot()
	if err != nil {
		return "", fmt.Errorf("conformance: %w", err)
	}
	dir, err := downloadModule(root, h2specModule+"@"+h2specVersion, h2specSum)
	if err != nil {
		return "", err
	}
	cache := filepath.Join(root, ".cache", "h2spec")
	src := filepath.Join(cache, "src")
	if err := os.RemoveAll(src); err != nil {
		return "", fmt.Errorf("conformance: h2spec: %w", err)
	}
	if err := copyTree(dir, src); err != nil {
		return "", fmt.Errorf("conformance: h2spec: copy %s: %w", dir, err)
	}
	testdata := filepath.Join(root, "internal", "conformance", "testdata")
	if *updateH2specMod {
		if err := tidyH2spec(src, testdata); err != nil {
			return "", err
		}
	}
	for _, f := range []struct{ from, to string }{{"h2spec.mod", "go.mod"}, {"h2spec.sum", "go.sum"}} {
		if err := copyFile(filepath.Join(testdata, f.from), filepath.Join(src, f.to), 0o644); err != nil {
			return "", fmt.Errorf("conformance: h2spec: %w", err)
		}
	}
	if err := patchH2spec(src); err != nil {
		return "", err
	}
	bin := filepath.Join(cache, "h2spec")
	if _, err := goCommand(src, "build", "-mod=readonly", "-o", bin, "./cmd/h2spec"); err != nil {
		return "", fmt.Errorf("conformance: build h2spec: %w", err)
	}
	return bin, nil
}

// downloadModule fetches mod (path@version) into the module cache with the
// go command, checks its checksum against sum and returns its directory.
func downloadModule(root, mod, sum string) (string, error) {
	out, err := goCommand(root, "mod", "download", "-json", mod)
	var info struct{ Dir, Sum, Error string }
	if jerr := json.Unmarshal(out, &info); jerr != nil && err == nil {
		err = jerr
	}
	if err == nil && info.Error != "" {
		err = errors.New(info.Error)
	}
	if err != nil {
		return "", fmt.Errorf("conformance: go mod download %s: %w", mod, err)
	}
	if info.Sum != sum {
		return "", fmt.Errorf("conformance: %s has checksum %s, want %s", mod, info.Sum, sum)
	}
	return info.Dir, nil
}

// tidyH2spec runs go mod init and go mod tidy in h2spec's copy src and
// keeps the result in testdata.
func tidyH2spec(src, testdata string) error {
	for _, args := range [][]string{{"mod", "init", h2specModule}, {"mod", "tidy"}} {
		if _, err := goCommand(src, args...); err != nil {
			return fmt.Errorf("conformance: h2spec: %w", err)
		}
	}
	for _, f := range []struct{ from, to string }{{"go.mod", "h2spec.mod"}, {"go.sum", "h2spec.sum"}} {
		if err := copyFile(filepath.Join(src, f.from), filepath.Join(testdata, f.to), 0o644); err != nil {
			return fmt.Errorf("conformance: h2spec: %w", err)
		}
	}
	return nil
}

// patchH2spec applies h2specPatches to the copy in src; a patch whose text
// is not found exactly once fails, so a changed h2spec cannot run unpatched.
func patchH2spec(src string) error {
	for _, p := range h2specPatches {
		path := filepath.Join(src, p.file)
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("conformance: patch h2spec: %w", err)
		}
		if n := bytes.Count(b, []byte(p.old)); n != 1 {
			return fmt.Errorf("conformance: patch h2spec: %s holds %q %d times, want once", p.file, p.old, n)
		}
		b = bytes.Replace(b, []byte(p.old), []byte(p.new), 1)
		if err := os.WriteFile(path, b, 0o644); err != nil {
			return fmt.Errorf("conformance: patch h2spec: %w", err)
		}
	}
	return nil
}

// goCommand runs the go command in dir, outside any workspace, and returns
// its standard output; the error carries its standard error.
func goCommand(dir string, args ...string) ([]byte, error) {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-buildvcs=false")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out, nil
}

// copyTree copies the regular files under from to to, writable (the
// module cache's are read-only).
func copyTree(from, to string) error {
	return filepath.WalkDir(from, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(from, path)
		if err != nil {
			return err
		}
		dst := filepath.Join(to, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(dst, 0o755)
		case d.Type().IsRegular():
			return copyFile(path, dst, 0o644)
		}
		return nil
	})
}

func copyFile(from, to string, perm os.FileMode) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, perm)
}
