package envoytest

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// RepoRoot returns the directory holding go.mod, walking up from the working
// directory.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("envoytest: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("envoytest: no go.mod above the working directory")
		}
		dir = parent
	}
}

func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// FreePort returns a TCP port that was free on 127.0.0.1 a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("envoytest: find a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Process is a program a test started with StartProcess.
type Process struct{ p *process }

// StartProcess starts cmd, called name in messages, with its output
// captured, and waits up to 30 s until ready reports true (Accepting,
// Answers200). The cleanup stops it (SIGTERM, then SIGKILL after 5 s) and
// logs its output when t failed; it also dies with the test binary.
func StartProcess(t testing.TB, name string, cmd *exec.Cmd, ready func() bool) *Process {
	t.Helper()
	p, err := startProcess(name, cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.stop(syscall.SIGTERM, 5*time.Second); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", name, p.out.String())
		}
	})
	up := Eventually(30*time.Second, func() bool { return !p.running() || ready() })
	if !p.running() {
		t.Fatalf("envoytest: %s %v: %v\n%s", name, cmd.Args[1:], p.exitError(), p.out.String())
	}
	if !up {
		t.Fatalf("envoytest: %s %v: not ready within 30 s\n%s", name, cmd.Args[1:], p.out.String())
	}
	return &Process{p: p}
}

// Pid returns the process id.
func (p *Process) Pid() int { return p.p.cmd.Process.Pid }

// Output returns what the process printed so far (its last megabyte).
func (p *Process) Output() string { return p.p.out.String() }

// Accepting returns a readiness check for StartProcess: whether addr
// (host:port) accepts TCP connections.
func Accepting(addr string) func() bool {
	return func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
		}
		return err == nil
	}
}

// Answers200 returns a readiness check for StartProcess: whether GET url
// answers 200.
func Answers200(url string) func() bool {
	client := &http.Client{Timeout: time.Second}
	return func() bool {
		resp, err := client.Get(url)
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
}

// process is a child process with its output kept in memory.
type process struct {
	name   string
	cmd    *exec.Cmd
	out    *Capped
	exited chan struct{}
	err    error // set before exited is closed
}

// startProcess starts name (for messages) as cmd with its output captured.
// The process is killed if the test binary dies.
func startProcess(name string, cmd *exec.Cmd) (*process, error) {
	p := &process{name: name, cmd: cmd, out: NewCapped(1 << 20), exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("envoytest: start %s: %w", name, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// exitError describes how the process ended, once it has.
func (p *process) exitError() error {
	if p.err == nil {
		return fmt.Errorf("%s exited with status 0", p.name)
	}
	return fmt.Errorf("%s exited: %w", p.name, p.err)
}

// running reports whether the process has not exited.
func (p *process) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// stop sends sig, waits up to grace, then kills the process and waits.
func (p *process) stop(sig os.Signal, grace time.Duration) error {
	if !p.running() {
		return nil
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.exited:
		return nil
	case <-time.After(grace):
	}
	_ = p.cmd.Process.Kill()
	select {
	case <-p.exited:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("envoytest: %s (pid %d) did not exit", p.name, p.cmd.Process.Pid)
	}
}

// Capped keeps the last bytes written to it (a process's output); safe for
// concurrent use. Make one with NewCapped.
type Capped struct {
	mu  sync.Mutex
	max int
	buf bytes.Buffer
}

// NewCapped returns a Capped that keeps the last max bytes.
func NewCapped(max int) *Capped { return &Capped{max: max} }

// Write keeps b, dropping the oldest bytes past the bound.
func (c *Capped) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.buf.Write(b)
	if over := c.buf.Len() - c.max; over > 0 {
		c.buf.Next(over)
	}
	return len(b), nil
}

// String returns the bytes kept.
func (c *Capped) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}

// Eventually calls cond every 20 ms until it returns true or timeout passes,
// and reports whether it did.
func Eventually(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}
