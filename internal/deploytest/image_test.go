package deploytest

import (
	"debug/buildinfo"
	"debug/elf"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/internal/testutil"
)

// buildContext copies the repository into a temporary directory as Docker
// would send it: without .git and what .dockerignore leaves out.
func buildContext(t *testing.T, root string, rules []ignoreRule) string {
	t.Helper()
	dir := t.TempDir()
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		if e.IsDir() {
			if rel == ".git" {
				return filepath.SkipDir
			}
			// An excluded directory is walked only when a "!" rule may
			// bring back something under it.
			if excluded(rules, rel) && !slices.ContainsFunc(rules, func(r ignoreRule) bool {
				return r.keep && strings.HasPrefix(r.pattern, rel+"/")
			}) {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dir, rel), 0o755)
		}
		if !e.Type().IsRegular() || excluded(rules, rel) {
			return nil
		}
		return copyFile(p, filepath.Join(dir, rel))
	})
	if err != nil {
		t.Fatalf("build context: %v", err)
	}
	return dir
}

// copyFile copies a regular file, keeping its mode, creating dst's parents.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, st.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// dockerCopy does what COPY src... dst does in a stage whose file system is
// fsRoot, working directory workdir, reading sources under from.
func dockerCopy(from, fsRoot, workdir string, cp copyIns) error {
	dst := cp.dst
	if !path.IsAbs(dst) {
		dst = path.Join(workdir, dst)
	}
	toDir := strings.HasSuffix(cp.dst, "/") || len(cp.srcs) > 1
	for _, src := range cp.srcs {
		s := filepath.Join(from, filepath.FromSlash(src))
		st, err := os.Stat(s)
		if err != nil {
			return fmt.Errorf("line %d: COPY %s: %w", cp.line, src, err)
		}
		target := filepath.Join(fsRoot, filepath.FromSlash(dst))
		if st.IsDir() { // a directory's contents go into dst
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
			if err := os.CopyFS(target, os.DirFS(s)); err != nil {
				return fmt.Errorf("line %d: COPY %s: %w", cp.line, src, err)
			}
			continue
		}
		if toDir {
			target = filepath.Join(target, path.Base(src))
		}
		if err := copyFile(s, target); err != nil {
			return fmt.Errorf("line %d: COPY %s: %w", cp.line, src, err)
		}
	}
	return nil
}

// buildStage runs the builder stage's instructions in a temporary tree: its
// WORKDIR, ENV and COPY instructions, and its RUN instructions, each of
// which must be a go command. Absolute paths in a command's arguments
// (-o /out/ratelimit) are taken inside the tree. It returns the tree.
func buildStage(t *testing.T, st *stage, context string) string {
	t.Helper()
	fsRoot := t.TempDir()
	workdir := "/"
	var env []string
	for _, e := range os.Environ() {
		// The image's build has no GOFLAGS; the toolchain is go.mod's.
		if !strings.HasPrefix(e, "GOFLAGS=") && !strings.HasPrefix(e, "GOTOOLCHAIN=") {
			env = append(env, e)
		}
	}
	env = append(env, "GOTOOLCHAIN=local")
	for _, in := range st.ins {
		switch in.cmd {
		case "WORKDIR":
			workdir = path.Join(workdir, in.args)
			if err := os.MkdirAll(filepath.Join(fsRoot, workdir), 0o755); err != nil {
				t.Fatal(err)
			}
		case "ENV":
			env = append(env, strings.Fields(in.args)...)
		case "COPY":
			cp, err := parseCopy(in)
			if err != nil {
				t.Fatal(err)
			}
			if cp.from != "" {
				t.Fatalf("line %d: the builder copies from another stage; this test does not know how to run that", in.line)
			}
			if err := dockerCopy(context, fsRoot, workdir, cp); err != nil {
				t.Fatal(err)
			}
		case "RUN":
			c, err := parseRun(in.args)
			if err != nil {
				t.Fatal(err)
			}
			if c.argv[0] != "go" {
				t.Fatalf("line %d: RUN %s: only go commands are run by this test", in.line, in.args)
			}
			argv := slices.Clone(c.argv)
			for i, a := range argv {
				if path.IsAbs(a) {
					argv[i] = filepath.Join(fsRoot, filepath.FromSlash(a))
					if err := os.MkdirAll(filepath.Dir(argv[i]), 0o755); err != nil {
						t.Fatal(err)
					}
				}
			}
			cmd := exec.Command("go", argv[1:]...)
			cmd.Dir = filepath.Join(fsRoot, workdir)
			cmd.Env = append(slices.Clone(env), c.env...)
			start := time.Now()
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("line %d: RUN %s: %v\n%s", in.line, in.args, err, out)
			}
			t.Logf("line %d: %s (%v)", in.line, strings.Join(append(slices.Clone(c.env), c.argv...), " "), time.Since(start).Round(time.Millisecond))
		default:
			t.Fatalf("line %d: %s in the builder: this test does not know how to run it", in.line, in.cmd)
		}
	}
	return fsRoot
}

// checkStatic fails t unless file is a static ELF executable: no program
// interpreter and no shared library needed.
func checkStatic(t *testing.T, file string) {
	t.Helper()
	f, err := elf.Open(file)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s: has a PT_INTERP program header (dynamically linked)", file)
		}
	}
	needed, err := f.DynString(elf.DT_NEEDED)
	if err != nil {
		t.Errorf("%s: dynamic section: %v", file, err)
	}
	if len(needed) > 0 {
		t.Errorf("%s: needs shared libraries %v", file, needed)
	}
}

// checkStripped fails t when file has a symbol table (-s) or DWARF (-w).
func checkStripped(t *testing.T, file string) {
	t.Helper()
	f, err := elf.Open(file)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	defer f.Close()
	for _, s := range f.Sections {
		if s.Name == ".symtab" || strings.HasPrefix(s.Name, ".debug_") || strings.HasPrefix(s.Name, ".zdebug_") {
			t.Errorf("%s: has section %s (not built with -ldflags \"-s -w\")", file, s.Name)
		}
	}
}

// TestImageBinary builds what the image holds as the Dockerfile says and
// runs its ENTRYPOINT.
func TestImageBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("deploytest: builds the binary, which -short does not")
	}
	root := testutil.RepoRoot(t)
	ignore := readRepoFile(t, ".dockerignore")
	d, errs := checkDockerfile(root, readRepoFile(t, "Dockerfile"), ignore)
	if len(errs) > 0 {
		t.Fatalf("Dockerfile: %v", errs)
	}
	start := time.Now()
	context := buildContext(t, root, parseDockerignore(ignore))
	builder := buildStage(t, d.build, context)
	t.Logf("builder stage run in %v", time.Since(start).Round(time.Millisecond))

	// The final stages, from what the builder produced.
	assemble := func(st *stage) string {
		fsRoot := t.TempDir()
		for _, in := range st.ins {
			if in.cmd != "COPY" {
				continue
			}
			cp, err := parseCopy(in)
			if err != nil {
				t.Fatal(err)
			}
			if cp.from != d.build.name {
				t.Fatalf("line %d: COPY from %q: this test assembles only from the builder", in.line, cp.from)
			}
			if _, err := os.Stat(filepath.Join(builder, cp.srcs[0])); os.IsNotExist(err) && !strings.HasPrefix(cp.srcs[0], "/out/") {
				// A file of the builder's base image (the CA bundle), not
				// of the build: the static checks cover it.
				t.Logf("line %d: %s comes from %s, not from the build", in.line, cp.srcs[0], d.build.base)
				continue
			}
			if err := dockerCopy(builder, fsRoot, "/", cp); err != nil {
				t.Fatal(err)
			}
		}
		return fsRoot
	}
	final := assemble(&d.stages[len(d.stages)-1])
	upstream := assemble(d.stage("upstream"))

	bin := filepath.Join(final, "bin", "ratelimit")
	checkStatic(t, bin)
	checkStatic(t, filepath.Join(upstream, "bin", "upstream"))

	// The binary says how it was built: the Dockerfile's flags (with
	// -trimpath Go does not record -ldflags; -s and -w show as the
	// missing symbol table and DWARF).
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	for k, want := range map[string]string{"CGO_ENABLED": "0", "-trimpath": "true"} {
		if settings[k] != want {
			t.Errorf("the binary was built with %s=%q, want %q (build settings %v)", k, settings[k], want, settings)
		}
	}
	checkStripped(t, bin)

	// Start the ENTRYPOINT as a container would: no arguments (it serves),
	// an environment of its own.
	configDir := t.TempDir()
	if err := os.CopyFS(configDir, os.DirFS(filepath.Join(root, "examples", "config"))); err != nil {
		t.Fatal(err)
	}
	srv := testutil.StartServer(t, testutil.ServerOptions{
		Bin:    bin,
		Env:    []string{"CONFIG_DIR=" + configDir, "SHUTDOWN_DRAIN=0s", "LOG_LEVEL=warn"},
		OwnEnv: true,
	})
	t.Logf("/bin/ratelimit serves: GET /healthcheck 200 after %v", time.Since(start).Round(time.Millisecond))
	p := srv.Process()
	_ = p.Signal(syscall.SIGTERM)
	select {
	case <-p.Exited():
		if err := p.Err(); err != nil {
			t.Errorf("/bin/ratelimit on SIGTERM: %v\n%s", err, p.Output())
		}
	case <-time.After(15 * time.Second):
		t.Errorf("/bin/ratelimit did not stop within 15 s of SIGTERM\n%s", p.Output())
	}
}
