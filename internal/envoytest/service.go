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
		t.Skipf("envoytest: needs the binary built from %s, which -short does not build", pkg)
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
		t.Fatalf("envoytest: %v", b.err)
	}
	return b.bin
}

// buildCommand builds the main package pkg (e.g. ./cmd/ratelimit) of the
// repository into a temporary directory and returns the binary's path.
func buildCommand(pkg string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "envoytest-"+filepath.Base(pkg)+"-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
	}
	return bin, nil
}

// Service is the ratelimit binary serving on loopback ports of its own.
type Service struct {
	// GRPCPort, HTTPPort and DebugPort are its listeners on 127.0.0.1.
	GRPCPort, HTTPPort, DebugPort int

	t         testing.TB
	configDir string
	env       []string

	mu   sync.Mutex
	proc *process
	logs strings.Builder // output of the processes stopped so far
}

// StartService runs `ratelimit serve -config_dir configDir` with env added
// to the environment and waits until /healthcheck answers 200. The cleanup
// stops it and logs its output when t failed.
func StartService(t testing.TB, configDir string, env ...string) *Service {
	t.Helper()
	s := &Service{
		GRPCPort: FreePort(t), HTTPPort: FreePort(t), DebugPort: FreePort(t),
		t: t, configDir: configDir, env: env,
	}
	t.Cleanup(func() {
		s.Stop()
		if t.Failed() {
			s.mu.Lock()
			t.Logf("ratelimit output:\n%s", s.logs.String())
			s.mu.Unlock()
		}
	})
	s.Start()
	return s
}

// Start starts the binary again after Stop, on the same ports.
func (s *Service) Start() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		s.t.Fatal("envoytest: the service is already running")
	}
	bin := Binary(s.t)
	env := append(os.Environ(),
		"GRPC_HOST=127.0.0.1", "GRPC_PORT="+strconv.Itoa(s.GRPCPort),
		"HOST=127.0.0.1", "PORT="+strconv.Itoa(s.HTTPPort),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+strconv.Itoa(s.DebugPort),
		"SHUTDOWN_DRAIN=0s", "LOG_FORMAT=text", "LOG_LEVEL=warn",
	)
	env = append(env, s.env...)
	var err error
	for range 50 { // a port of the previous process may linger for a moment
		cmd := exec.Command(bin, "serve", "-config_dir", s.configDir)
		cmd.Env = env
		p, serr := startProcess("ratelimit", cmd)
		if serr != nil {
			s.t.Fatal(serr)
		}
		if err = s.waitHealthy(p); err == nil {
			s.proc = p
			return
		}
		_ = p.stop(syscall.SIGKILL, 0)
		s.logs.WriteString(p.out.String())
		if !strings.Contains(p.out.String(), "address already in use") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.t.Fatalf("envoytest: ratelimit: %v\n%s", err, s.logs.String())
}

func (s *Service) waitHealthy(p *process) error {
	client := &http.Client{Timeout: time.Second}
	url := fmt.Sprintf("http://127.0.0.1:%d/healthcheck", s.HTTPPort)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if !p.running() {
			return p.exitError()
		}
		resp, err := client.Get(url)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("not healthy within 30s")
}

// Stop stops the binary (SIGTERM, then SIGKILL after 10 s) and waits for it.
// Stopping a stopped service does nothing.
func (s *Service) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return
	}
	if err := s.proc.stop(syscall.SIGTERM, 10*time.Second); err != nil {
		s.t.Error(err)
	}
	s.logs.WriteString(s.proc.out.String())
	s.proc = nil
}

// Pid returns the running process's id, or 0.
func (s *Service) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.cmd.Process.Pid
}

// GRPCAddr returns host:port of the gRPC listener.
func (s *Service) GRPCAddr() string { return fmt.Sprintf("127.0.0.1:%d", s.GRPCPort) }

// Metrics returns the samples of the service's Prometheus metrics, keyed by
// the series as the exposition prints it, e.g.
// `ratelimit_decisions_total{code="OK",domain="edge"}`.
func (s *Service) Metrics(t testing.TB) map[string]float64 {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", s.DebugPort))
	if err != nil {
		t.Fatalf("envoytest: service metrics: %v", err)
	}
	defer resp.Body.Close()
	out := make(map[string]float64)
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("envoytest: service metrics: %v", err)
	}
	return out
}
