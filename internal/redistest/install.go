package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/dynalimit/dynalimit/internal/testutil"
)

// Flavor is the server a Server runs: Redis or Valkey, started with the
// same flags.
type Flavor int

const (
	// Redis is redis-server and redis-cli (Debian's redis-server and
	// redis-tools).
	Redis Flavor = iota
	// Valkey is valkey-server and valkey-cli (Debian's valkey-server and
	// valkey-tools, which bookworm has in its backports suite).
	Valkey
)

// String returns the flavor's name: redis or valkey.
func (f Flavor) String() string {
	if f == Valkey {
		return "valkey"
	}
	return "redis"
}

// packages are the Debian packages that hold the flavor's server and
// client.
func (f Flavor) packages() []string {
	return []string{f.String() + "-server", f.String() + "-tools"}
}

// Binaries are a server and its command-line client, and the environment
// they need (LD_LIBRARY_PATH for the libraries extracted beside them).
type Binaries struct {
	Flavor Flavor
	// Server and CLI are the paths of the server and of the client.
	Server, CLI string
	// Env is appended to the environment of every process started from
	// Server or CLI.
	Env []string
	// Version is the first line the server prints for --version.
	Version string
}

// Command returns a command running the binary bin (b.Server or b.CLI)
// with args, in b's environment.
func (b Binaries) Command(bin string, args ...string) *exec.Cmd {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), b.Env...)
	return cmd
}

var found struct {
	sync.Mutex
	bins map[Flavor]Binaries
}

// FindBinaries returns the flavor's binaries: those on PATH when the server
// and the client are both there, otherwise those Download extracts under
// the repository's .cache/. The answer is kept for the process.
func FindBinaries(f Flavor) (Binaries, error) {
	found.Lock()
	defer found.Unlock()
	if b, ok := found.bins[f]; ok {
		return b, nil
	}
	b, err := onPath(f)
	if err != nil {
		root, rerr := testutil.FindRepoRoot()
		if rerr != nil {
			return Binaries{}, rerr
		}
		if b, err = Download(root, f); err != nil {
			return Binaries{}, err
		}
	}
	if found.bins == nil {
		found.bins = make(map[Flavor]Binaries)
	}
	found.bins[f] = b
	return b, nil
}

// onPath returns the flavor's binaries found on PATH.
func onPath(f Flavor) (Binaries, error) {
	server, err := exec.LookPath(f.String() + "-server")
	if err != nil {
		return Binaries{}, err
	}
	cli, err := exec.LookPath(f.String() + "-cli")
	if err != nil {
		return Binaries{}, err
	}
	b := Binaries{Flavor: f, Server: server, CLI: cli}
	return b, b.readVersion()
}

// readVersion sets b.Version from the server's --version.
func (b *Binaries) readVersion() error {
	out, err := b.Command(b.Server, "--version").CombinedOutput()
	if err != nil {
		return fmt.Errorf("redistest: %s --version: %w\n%s", b.Server, err, out)
	}
	b.Version = strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
	return nil
}

// Download returns the flavor's binaries extracted under
// root/.cache/{redis,valkey}/debian/, fetching them the first time without
// root: `apt-get download` of the server and tools packages and of those
// of their libraries that are not installed, then `dpkg -x` of each. Redis
// comes from the suites the machine's apt sources name (first from its
// package lists; when they lack it, from lists of its own under the cache
// after an `apt-get update` of the machine's main suite), Valkey from
// lists of its own of the main and backports suites of the machine's
// Debian mirror. It needs apt-get and dpkg (a Debian machine) and a
// Debian mirror the first time. Concurrent callers, in this process or
// others, fetch once: a file lock orders them.
func Download(root string, f Flavor) (Binaries, error) {
	base := filepath.Join(root, ".cache", f.String())
	dir := filepath.Join(base, "debian")
	if err := os.MkdirAll(base, 0o755); err != nil {
		return Binaries{}, err
	}
	lock, err := os.OpenFile(filepath.Join(base, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return Binaries{}, err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return Binaries{}, fmt.Errorf("redistest: lock %s: %w", base, err)
	}
	if _, err := os.Stat(filepath.Join(dir, ".complete")); err == nil {
		b := extracted(f, dir)
		return b, b.readVersion()
	}
	for _, tool := range []string{"apt-get", "apt-cache", "dpkg", "dpkg-query"} {
		if _, err := exec.LookPath(tool); err != nil {
			return Binaries{}, fmt.Errorf("redistest: no %s-server on PATH, and no %s to fetch Debian's %s: install %s (Debian: apt-get install %s)",
				f, tool, strings.Join(f.packages(), " and "), strings.Join(f.packages(), " and "), f.packages()[0])
		}
	}
	if err := fetch(f, base, dir); err != nil {
		return Binaries{}, err
	}
	b := extracted(f, dir)
	if err := checkLibraries(b); err != nil {
		return Binaries{}, err
	}
	if err := b.readVersion(); err != nil {
		return Binaries{}, err
	}
	return b, os.WriteFile(filepath.Join(dir, ".complete"), []byte(b.Version+"\n"), 0o644)
}

// extracted returns the binaries of f as fetch lays them out under dir.
func extracted(f Flavor, dir string) Binaries {
	var libs []string
	for _, pattern := range []string{"usr/lib/*-linux-gnu*", "lib/*-linux-gnu*"} {
		m, _ := filepath.Glob(filepath.Join(dir, pattern))
		libs = append(libs, m...)
	}
	if old := os.Getenv("LD_LIBRARY_PATH"); old != "" {
		libs = append(libs, old)
	}
	b := Binaries{
		Flavor: f,
		Server: filepath.Join(dir, "usr", "bin", f.String()+"-server"),
		CLI:    filepath.Join(dir, "usr", "bin", f.String()+"-cli"),
	}
	if len(libs) > 0 {
		b.Env = []string{"LD_LIBRARY_PATH=" + strings.Join(libs, ":")}
	}
	return b
}

// fetch downloads the flavor's packages and their missing libraries into
// base/debs and extracts them into dir.
func fetch(f Flavor, base, dir string) error {
	debs := filepath.Join(base, "debs")
	for _, d := range []string{debs, dir} {
		if err := os.RemoveAll(d); err != nil {
			return err
		}
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	var apt aptConfig
	if f == Valkey {
		var err error
		if apt, err = privateLists(base, true); err != nil {
			return err
		}
	}
	pkgs, err := apt.withDependencies(f.packages())
	if err != nil && f == Redis {
		// The machine's lists may be empty (no apt-get update yet) and
		// only root may fill them: fill lists of our own.
		if apt, err = privateLists(base, false); err == nil {
			pkgs, err = apt.withDependencies(f.packages())
		}
	}
	if err != nil {
		return err
	}
	if err := apt.run(debs, "apt-get", append([]string{"download"}, pkgs...)...); err != nil {
		return err
	}
	files, err := filepath.Glob(filepath.Join(debs, "*.deb"))
	if err != nil {
		return err
	}
	for _, deb := range files {
		if out, err := exec.Command("dpkg", "-x", deb, dir).CombinedOutput(); err != nil {
			return fmt.Errorf("redistest: dpkg -x %s: %w\n%s", deb, err, out)
		}
	}
	return nil
}

// checkLibraries fails when the server or the client needs a library
// that neither the machine nor the extracted packages hold.
func checkLibraries(b Binaries) error {
	for _, bin := range []string{b.Server, b.CLI} {
		out, err := b.Command("ldd", bin).CombinedOutput()
		if err != nil {
			return fmt.Errorf("redistest: ldd %s: %w\n%s", bin, err, out)
		}
		var missing []string
		for _, line := range strings.Split(string(out), "\n") {
			if strings.Contains(line, "not found") {
				missing = append(missing, strings.TrimSpace(line))
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("redistest: %s needs libraries that are neither installed nor fetched: %s", bin, strings.Join(missing, "; "))
		}
	}
	return nil
}

// aptConfig is the -o options that point apt at lists of our own (none:
// the machine's).
type aptConfig []string

// run runs an apt tool with the options, in dir.
func (a aptConfig) run(dir, tool string, args ...string) error {
	_, err := a.output(dir, tool, args...)
	return err
}

// output runs an apt tool with the options, in dir, and returns its
// standard output.
func (a aptConfig) output(dir, tool string, args ...string) (string, error) {
	cmd := exec.Command(tool, append(append([]string{}, a...), args...)...)
	cmd.Dir = dir
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("redistest: %s %s: %w\n%s%s", tool, strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out), nil
}

// withDependencies returns pkgs and the packages they depend on that are
// not installed (the libraries: jemalloc, lzf), as apt-cache knows them.
func (a aptConfig) withDependencies(pkgs []string) ([]string, error) {
	out, err := a.output("", "apt-cache", append([]string{"depends", "--no-recommends", "--no-suggests"}, pkgs...)...)
	if err != nil {
		return nil, err
	}
	all := append([]string{}, pkgs...)
	seen := map[string]bool{}
	for _, p := range pkgs {
		seen[p] = true
	}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		// "  Depends: libjemalloc2"; alternatives are indented further.
		dep, ok := strings.CutPrefix(sc.Text(), "  Depends: ")
		if !ok || strings.HasPrefix(dep, "<") || seen[dep] {
			continue
		}
		seen[dep] = true
		if !isInstalled(dep) {
			all = append(all, dep)
		}
	}
	return all, nil
}

// isInstalled is installed, or a test's stand-in.
var isInstalled = installed

// installed reports whether dpkg has package installed.
func installed(pkg string) bool {
	out, err := exec.Command("dpkg-query", "-W", "-f=${Status}", pkg).Output()
	return err == nil && strings.TrimSpace(string(out)) == "install ok installed"
}

// privateLists writes a sources list of the machine's Debian mirror (its
// main suite, and its backports suite when backports) under base, updates
// package lists of its own from it, and returns the options that use them.
func privateLists(base string, backports bool) (aptConfig, error) {
	uri, suite, err := debianMirror()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(base, "apt")
	for _, d := range []string{"lists/partial", "cache/archives/partial"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	list := fmt.Sprintf("deb %s %s main\n", uri, suite)
	if backports {
		list += fmt.Sprintf("deb %s %s-backports main\n", uri, suite)
	}
	sources := filepath.Join(dir, "sources.list")
	if err := os.WriteFile(sources, []byte(list), 0o644); err != nil {
		return nil, err
	}
	a := aptConfig{
		"-o", "Dir::Etc::sourcelist=" + sources, "-o", "Dir::Etc::sourceparts=-",
		"-o", "Dir::State::Lists=" + filepath.Join(dir, "lists"), "-o", "Dir::Cache=" + filepath.Join(dir, "cache"),
		"-o", "Debug::NoLocking=1",
	}
	return a, a.run("", "apt-get", "-q", "update")
}

// debianMirror returns the URI of the mirror the machine's apt sources
// name for its release's main suite, and that suite (bookworm).
func debianMirror() (uri, suite string, err error) {
	suite = osRelease("VERSION_CODENAME")
	if suite == "" {
		return "", "", errors.New("redistest: /etc/os-release names no VERSION_CODENAME: not a Debian machine")
	}
	files, _ := filepath.Glob("/etc/apt/sources.list.d/*.sources")
	files = append(files, "/etc/apt/sources.list")
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			continue
		}
		if u := mirrorIn(string(b), suite); u != "" {
			return u, suite, nil
		}
	}
	return "", "", fmt.Errorf("redistest: no apt source of the suite %s in /etc/apt", suite)
}

// mirrorIn returns the URI that src (a sources.list or a deb822 .sources
// file) gives the suite, or "".
func mirrorIn(src, suite string) string {
	var uris string
	for _, line := range strings.Split(src, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 3 && f[0] == "deb":
			i := 1
			if strings.HasPrefix(f[1], "[") { // deb [signed-by=...] uri suite
				for i < len(f) && !strings.HasSuffix(f[i], "]") {
					i++
				}
				i++
			}
			if i+1 < len(f) && f[i+1] == suite {
				return f[i]
			}
		case len(f) >= 2 && f[0] == "URIs:":
			uris = f[1]
		case len(f) >= 2 && f[0] == "Suites:":
			for _, s := range f[1:] {
				if s == suite && uris != "" {
					return uris
				}
			}
		}
	}
	return ""
}

// osRelease returns the value of key in /etc/os-release, or "".
func osRelease(key string) string {
	b, err := os.ReadFile("/etc/os-release")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+"="); ok {
			return strings.Trim(v, `"`)
		}
	}
	return ""
}
