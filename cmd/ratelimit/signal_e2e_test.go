package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/internal/testutil"
)

// TestBinaryExitsZeroOnSignal: SIGINT (Ctrl-C) and SIGTERM each stop the
// binary cleanly: it drains, says it stopped, and exits 0.
func TestBinaryExitsZeroOnSignal(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			p := startBinary(t, filepath.Join("..", "..", "examples", "config")).Process()
			if err := p.Signal(sig); err != nil {
				t.Fatal(err)
			}
			select {
			case <-p.Exited():
				if err := p.Err(); err != nil {
					t.Errorf("exit after %v = %v, want 0; output:\n%s", sig, err, p.Output())
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("binary did not exit within 10s of %v", sig)
			}
			if !strings.Contains(p.Output(), `"msg":"stopped"`) {
				t.Errorf("after %v the binary did not log that it stopped:\n%s", sig, p.Output())
			}
		})
	}
}

// TestMakeRunInterrupted: `make run` stopped with Ctrl-C (SIGINT to its
// process group, as a terminal sends it) ends without make reporting an
// error: the service it runs exits 0.
func TestMakeRunInterrupted(t *testing.T) {
	if testing.Short() {
		t.Skip("needs make and the built binary, which -short does not build")
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Fatalf("make run: no make command on this machine: %v", err)
	}
	g, h, d := testutil.FreePort(t), testutil.FreePort(t), testutil.FreePort(t)
	cmd := exec.Command("make", "-C", filepath.Join("..", ".."), "--no-print-directory", "run", "BIN="+t.TempDir())
	cmd.Env = append(os.Environ(),
		"GRPC_HOST=127.0.0.1", fmt.Sprintf("GRPC_PORT=%d", g),
		"HOST=127.0.0.1", fmt.Sprintf("PORT=%d", h),
		"DEBUG_HOST=127.0.0.1", fmt.Sprintf("DEBUG_PORT=%d", d),
		"SHUTDOWN_DRAIN=100ms",
	)
	out := testutil.NewLockedBuffer(1 << 20)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	})
	url := fmt.Sprintf("http://127.0.0.1:%d/healthcheck", h)
	healthy := testutil.Answers200(url)
	var early error
	gone := false
	up := testutil.Eventually(2*time.Minute, func() bool { // a first build is in that time
		select {
		case early = <-exited:
			gone = true
			return true
		default:
			return healthy()
		}
	})
	if gone || !up {
		t.Fatalf("make run: %s did not answer 200 (exited: %v, %v):\n%s", url, gone, early, out.String())
	}

	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		// make itself gets the interrupt too and, once its recipe has
		// ended, dies of it, as in a terminal; that is not an error it
		// reports.
		var ee *exec.ExitError
		if err != nil && !(errors.As(err, &ee) && ee.Sys().(syscall.WaitStatus).Signal() == syscall.SIGINT) {
			t.Errorf("make run after SIGINT = %v, want exit 0 or killed by SIGINT; output:\n%s", err, out.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("make run did not exit within 30s of SIGINT; output:\n%s", out.String())
	}
	if strings.Contains(out.String(), "make: ***") || !strings.Contains(out.String(), `"msg":"stopped"`) {
		t.Errorf("make run after SIGINT printed:\n%s\nwant the service's \"stopped\" and no make error", out.String())
	}
}
