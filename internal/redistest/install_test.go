package redistest

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestDownload: the binaries fetched from Debian's packages without root,
// with the libraries the machine lacks (here: as if jemalloc and lzf were
// not installed), run whatever PATH holds, on the fetched libraries.
func TestDownload(t *testing.T) {
	was := isInstalled
	t.Cleanup(func() { isInstalled = was })
	isInstalled = func(pkg string) bool { return pkg != "libjemalloc2" && pkg != "liblzf1" && installed(pkg) }
	root := t.TempDir()
	b, err := Download(root, Redis)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.Version, "v=7.") || !strings.HasPrefix(b.Server, root) {
		t.Fatalf("server %s, version %q", b.Server, b.Version)
	}
	out, err := b.Command("ldd", b.Server).CombinedOutput()
	if err != nil {
		t.Fatalf("ldd: %v\n%s", err, out)
	}
	for _, lib := range []string{"libjemalloc.so.2", "liblzf.so.1"} {
		if !strings.Contains(string(out), lib+" => "+filepath.Join(root, ".cache")) {
			t.Errorf("%s is not the one fetched:\n%s", lib, out)
		}
	}
	if out, err := b.Command(b.CLI, "--version").CombinedOutput(); err != nil {
		t.Fatalf("%s --version: %v\n%s", b.CLI, err, out)
	}
	again, err := Download(root, Redis) // from the cache
	if err != nil || again.Server != b.Server {
		t.Fatalf("the second call: %v, %+v", err, again)
	}
}

// TestMirrorIn: the mirror of a suite is read from both formats of apt's
// sources.
func TestMirrorIn(t *testing.T) {
	for src, want := range map[string]string{
		"deb http://m.example/debian bookworm main\n":                                    "http://m.example/debian",
		"deb [signed-by=/k.gpg arch=amd64] http://m.example/debian bookworm main\n":      "http://m.example/debian",
		"deb http://m.example/debian bookworm-updates main\n":                            "",
		"Types: deb\nURIs: http://m.example/debian\nSuites: bookworm bookworm-updates\n": "http://m.example/debian",
		"Types: deb\nURIs: http://s.example/sec\nSuites: bookworm-security\n":            "",
	} {
		if got := mirrorIn(src, "bookworm"); got != want {
			t.Errorf("%q: %q, want %q", src, got, want)
		}
	}
}

// TestValkey: Valkey runs with the same flags, alone and as a cluster.
func TestValkey(t *testing.T) {
	s := Start(t, Options{Flavor: Valkey, Password: "secret"})
	t.Logf("%s", s.Binaries().Version)
	if got := s.Info("server")["server_name"]; got != "valkey" {
		t.Fatalf("server_name %q", got)
	}
	if got := s.MustDo("SET", "k", "v"); got != "OK" {
		t.Fatalf("SET: %v", got)
	}
	if got := s.CommandStats()["set"]; got != 1 {
		t.Fatalf("SET calls %d", got)
	}
	if _, err := exec.LookPath(s.Binaries().CLI); err != nil {
		t.Fatal(err)
	}
	c := StartCluster(t, 3, 0, Options{Flavor: Valkey})
	if got := c.MasterOf("k").MustDo("SET", "k", "v"); got != "OK" {
		t.Fatalf("SET on the cluster: %v", got)
	}
}
