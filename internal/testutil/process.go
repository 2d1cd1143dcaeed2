package testutil

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// outputMax bounds the output a Process keeps (its last megabyte).
const outputMax = 1 << 20

// Process is a child process with its output kept in a LockedBuffer.
type Process struct {
	name   string
	cmd    *exec.Cmd
	out    *LockedBuffer
	exited chan struct{}
	err    error // set before exited is closed
}

// Launch starts cmd, called name in messages, with its output captured.
// The process is killed if the test binary dies; stopping it otherwise is
// the caller's (Stop).
func Launch(name string, cmd *exec.Cmd) (*Process, error) {
	p := &Process{name: name, cmd: cmd, out: NewLockedBuffer(outputMax), exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("testutil: start %s: %w", name, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// StartProcess starts cmd, called name in messages, with its output
// captured, and waits up to 30 s until ready reports true (Accepting,
// Answers200; nil: at once). The cleanup stops it (SIGTERM, then SIGKILL
// after 5 s) and logs its output when t failed.
func StartProcess(t testing.TB, name string, cmd *exec.Cmd, ready func() bool) *Process {
	t.Helper()
	p, err := Launch(name, cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Stop(syscall.SIGTERM, 5*time.Second); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", name, p.Output())
		}
	})
	if ready == nil {
		return p
	}
	up := Eventually(30*time.Second, func() bool { return !p.Running() || ready() })
	if !p.Running() {
		t.Fatalf("testutil: %s %v: %v\n%s", name, cmd.Args[1:], p.ExitError(), p.Output())
	}
	if !up {
		t.Fatalf("testutil: %s %v: not ready within 30 s\n%s", name, cmd.Args[1:], p.Output())
	}
	return p
}

// Pid returns the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Output returns what the process printed so far (its last megabyte).
func (p *Process) Output() string { return p.out.String() }

// Signal sends sig to the process.
func (p *Process) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Exited is closed when the process has exited; Err then says how.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Err returns what Wait returned (nil for exit status 0) once Exited is
// closed.
func (p *Process) Err() error {
	<-p.exited
	return p.err
}

// ExitError describes how the process ended, once it has.
func (p *Process) ExitError() error {
	if err := p.Err(); err != nil {
		return fmt.Errorf("%s exited: %w", p.name, err)
	}
	return fmt.Errorf("%s exited with status 0", p.name)
}

// Running reports whether the process has not exited.
func (p *Process) Running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// Stop sends sig, waits up to grace, then kills the process and waits for
// it. A grace of 0 kills it at once. Stopping an exited process does
// nothing.
func (p *Process) Stop(sig os.Signal, grace time.Duration) error {
	if !p.Running() {
		return nil
	}
	if grace > 0 {
		_ = p.cmd.Process.Signal(sig)
		select {
		case <-p.exited:
			return nil
		case <-time.After(grace):
		}
	}
	_ = p.cmd.Process.Kill()
	select {
	case <-p.exited:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("testutil: %s (pid %d) did not exit", p.name, p.cmd.Process.Pid)
	}
}

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

// BusyCore keeps one core busy in another process until t ends, as a
// neighbour on a shared machine would: a concurrency test must hold with
// it running.
func BusyCore(t testing.TB) {
	t.Helper()
	cmd := exec.Command("sh", "-c", "while :; do :; done")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("testutil: busy core: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
}
