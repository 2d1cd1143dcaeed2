package walkthrough

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/internal/testutil"
)

// Bounds of the harness (see the package documentation).
const (
	readyTimeout   = 3 * time.Minute
	commandTimeout = 10 * time.Minute
	portsTimeout   = 10 * time.Second
	stopTimeout    = 30 * time.Second
)

// ports are the fixed ports the README's walkthroughs use, with what uses
// them.
var ports = []struct {
	port int
	what string
}{
	{8000, "DynamoDB Local"}, {6379, "Redis"},
	{8080, "the service's HTTP port"}, {8081, "the service's gRPC port"}, {6070, "the service's debug port"},
	{9080, "a second replica's HTTP port"}, {9081, "a second replica's gRPC port"}, {7070, "a second replica's debug port"},
	{6071, "the aggregator's debug port"},
	{8090, "the demo application"},
	{10000, "Envoy's listener"}, {9901, "Envoy's admin port"},
}

// runner runs one walkthrough.
type runner struct {
	t     *testing.T
	root  string
	state string        // the exported variables of the foreground shell
	ready time.Duration // how long a background block may take (readyTimeout when zero)
	wait  time.Duration // how long a stop block may take (stopTimeout when zero)
	bg    []*group
}

// run runs w's blocks in order; it stops at the first that disagrees.
func (r *runner) run(w walk) {
	t := r.t
	r.portsFree()
	r.state = filepath.Join(t.TempDir(), "env")
	if err := os.WriteFile(r.state, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.stop)
	for i, b := range w.blocks {
		switch b.kind {
		case background:
			start := time.Now()
			if err := r.background(b, stoppedLater(w.blocks[i+1:])); err != nil {
				t.Fatal(err)
			}
			t.Logf("README.md:%d: background block ready (%s) after %v", b.line, strings.Join(b.ready, " "), time.Since(start).Round(time.Millisecond))
		case interrupt:
			start := time.Now()
			if err := r.interrupt(b); err != nil {
				t.Fatal(err)
			}
			t.Logf("README.md:%d: Ctrl-C and the stop block: the background block ended after %v", b.line, time.Since(start).Round(time.Millisecond))
		default:
			for _, c := range b.cmds {
				start := time.Now()
				err := r.foreground(b.kind, c)
				t.Logf("README.md:%d: $ %s  (%v)", c.line, c.cmd, time.Since(start).Round(time.Millisecond))
				if err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

// portsFree fails t unless every walkthrough port is free, naming what
// holds one; a port a walkthrough before just released gets a moment.
func (r *runner) portsFree() {
	r.t.Helper()
	deadline := time.Now().Add(portsTimeout)
	for _, p := range ports {
		for {
			l, err := net.Listen("tcp", ":"+strconv.Itoa(p.port))
			if err == nil {
				_ = l.Close()
				break
			}
			if time.Now().After(deadline) {
				r.t.Fatalf("port %d (%s) is taken by %s: the README's walkthroughs use fixed ports; stop it and run again (%v)",
					p.port, p.what, holder(p.port), err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// foreground runs one command of the first terminal and checks it.
func (r *runner) foreground(k kind, c command) error {
	script := fmt.Sprintf("set -a\n. %q\n%s\n__walkthrough_rc=$?\nexport -p > %q\nexit $__walkthrough_rc\n", r.state, c.cmd, r.state)
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir = r.root
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if k == commands {
		if err != nil {
			return fmt.Errorf("README.md:%d: %s\nfailed: %w\noutput:\n%s\nstderr:\n%s", c.line, c.cmd, err, indent(normalize(stdout.String())), indent(normalize(stderr.String())))
		}
		return nil
	}
	got, want := normalize(stdout.String()), normalize(c.want)
	if !matches(got, want) || err != nil {
		return fmt.Errorf("README.md:%d: $ %s\nexit: %s\noutput:\n%s\nwant (as the README shows):\n%s\nstderr (not compared):\n%s",
			c.line, c.cmd, errOrZero(err), indent(got), indent(want), indent(normalize(stderr.String())))
	}
	return nil
}

func errOrZero(err error) string {
	if err == nil {
		return "0"
	}
	return err.Error()
}

func indent(s string) string {
	if s == "" {
		return "\t(nothing)"
	}
	return "\t" + strings.ReplaceAll(s, "\n", "\n\t")
}

// group is a background block's process group.
type group struct {
	line   int
	cmd    *exec.Cmd
	stdin  io.WriteCloser // the shell's input; closed but for a block a stop block ends
	out    *testutil.LockedBuffer
	exited chan struct{}
}

// stoppedLater reports whether a stop block comes after a background
// block, before any other background block: the one it stops.
func stoppedLater(rest []block) bool {
	for _, b := range rest {
		switch b.kind {
		case background:
			return false
		case interrupt:
			return true
		}
	}
	return false
}

// background starts b and waits until each of its targets is ready. The
// shell reads b's script on its input, which stays open when keepOpen (a
// stop block types more lines there later).
func (r *runner) background(b block, keepOpen bool) error {
	cmd := exec.Command("bash", "-s")
	cmd.Dir = r.root
	g := &group{line: b.line, cmd: cmd, out: testutil.NewLockedBuffer(1 << 20), exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = g.out, g.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return fmt.Errorf("README.md:%d: start the background block: %w", b.line, err)
	}
	g.stdin = stdin
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("README.md:%d: start the background block: %w", b.line, err)
	}
	if _, err := io.WriteString(stdin, b.text); err != nil {
		return fmt.Errorf("README.md:%d: start the background block: %w", b.line, err)
	}
	if !keepOpen {
		_ = stdin.Close()
	}
	go func() {
		_ = cmd.Wait()
		close(g.exited)
	}()
	r.bg = append(r.bg, g)
	deadline := time.Now().Add(r.readyTimeout())
	for _, target := range b.ready {
		for !ready(target) {
			select {
			case <-g.exited:
				return fmt.Errorf("README.md:%d: the background block ended (%v) before %s was ready; output:\n%s", b.line, cmd.ProcessState, target, indent(normalize(g.out.String())))
			case <-time.After(100 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("README.md:%d: %s not ready within %v; output:\n%s", b.line, target, r.readyTimeout(), indent(normalize(g.out.String())))
			}
		}
	}
	return nil
}

func (r *runner) readyTimeout() time.Duration {
	if r.ready > 0 {
		return r.ready
	}
	return readyTimeout
}

// ready reports whether target answers: a 200 to a GET, or a connection.
func ready(target string) bool {
	if addr, ok := strings.CutPrefix(target, "tcp://"); ok {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return false
		}
		_ = c.Close()
		return true
	}
	client := &http.Client{Timeout: time.Second}
	resp, err := client.Get(target)
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// stop kills every background group, waits for them and, when the test
// failed, logs their output.
func (r *runner) stop() {
	for _, g := range r.bg {
		_ = syscall.Kill(-g.cmd.Process.Pid, syscall.SIGKILL)
		select {
		case <-g.exited:
		case <-time.After(10 * time.Second):
			r.t.Errorf("README.md:%d: the background block (pid %d) did not exit", g.line, g.cmd.Process.Pid)
		}
		// The group's other processes die with the signal; wait until none
		// is left, so the next walkthrough finds its ports free.
		for i := 0; i < 100 && syscall.Kill(-g.cmd.Process.Pid, 0) == nil; i++ {
			time.Sleep(50 * time.Millisecond)
		}
		if r.t.Failed() {
			r.t.Logf("README.md:%d: output of the background block:\n%s", g.line, g.out.String())
		}
	}
	r.bg = nil
}

// interrupt runs a stop block in the terminal of the last background
// block, as a user would: Ctrl-C (SIGINT to the command in the
// foreground), then the block's lines typed into that shell, which then
// ends. Every process of the group must have ended within stopTimeout, and
// the shell must exit 0 (the status of the block's last line).
func (r *runner) interrupt(b block) error {
	if len(r.bg) == 0 {
		return fmt.Errorf("README.md:%d: a stop block with no background block running", b.line)
	}
	g := r.bg[len(r.bg)-1]
	fg, err := foregroundChild(g.cmd.Process.Pid)
	if err != nil {
		return fmt.Errorf("README.md:%d: Ctrl-C in the background block of README.md:%d: %w", b.line, g.line, err)
	}
	if err := syscall.Kill(fg, syscall.SIGINT); err != nil {
		return fmt.Errorf("README.md:%d: Ctrl-C (SIGINT to pid %d): %w", b.line, fg, err)
	}
	if _, err := io.WriteString(g.stdin, b.text); err != nil {
		return fmt.Errorf("README.md:%d: type the stop block into the background block's shell: %w", b.line, err)
	}
	_ = g.stdin.Close()
	wait := r.wait
	if wait == 0 {
		wait = stopTimeout
	}
	deadline := time.Now().Add(wait)
	for syscall.Kill(-g.cmd.Process.Pid, 0) == nil {
		if time.Now().After(deadline) {
			return fmt.Errorf("README.md:%d: the background block of README.md:%d still runs %v after Ctrl-C and the stop block; output:\n%s",
				b.line, g.line, wait, indent(normalize(g.out.String())))
		}
		time.Sleep(50 * time.Millisecond)
	}
	<-g.exited
	if !g.cmd.ProcessState.Success() {
		return fmt.Errorf("README.md:%d: the background block's shell ended %v after the stop block; output:\n%s", b.line, g.cmd.ProcessState, indent(normalize(g.out.String())))
	}
	return nil
}

// foregroundChild returns the youngest child of the shell pid: the command
// it runs in the foreground (those it started with & came before).
func foregroundChild(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return 0, fmt.Errorf("the shell's children: %w", err)
	}
	best, bestStart := 0, int64(-1)
	for _, f := range strings.Fields(string(b)) {
		child, err := strconv.Atoi(f)
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", child))
		if err != nil {
			continue
		}
		// The fields after the command's name, in parentheses: the 20th
		// of them is the start time (field 22 of proc(5)).
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(fields) < 20 {
			continue
		}
		start, err := strconv.ParseInt(fields[19], 10, 64)
		if err != nil {
			continue
		}
		if start > bestStart || (start == bestStart && child > best) {
			best, bestStart = child, start
		}
	}
	if best == 0 {
		return 0, fmt.Errorf("the shell (pid %d) runs no command", pid)
	}
	return best, nil
}

// holder names the process listening on port, from /proc.
func holder(port int) string {
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 || fields[3] != "0A" { // LISTEN
				continue
			}
			_, hexPort, _ := strings.Cut(fields[1], ":")
			if p, err := strconv.ParseUint(hexPort, 16, 16); err == nil && int(p) == port {
				inodes[fields[9]] = true
			}
		}
		_ = fh.Close()
	}
	if len(inodes) == 0 {
		return "a process this user cannot see"
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range procs {
		link, err := os.Readlink(fd)
		if err != nil || !strings.HasPrefix(link, "socket:[") {
			continue
		}
		if inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] {
			pid := strings.Split(fd, "/")[2]
			cmdline, _ := os.ReadFile("/proc/" + pid + "/cmdline")
			return fmt.Sprintf("pid %s (%s)", pid, strings.TrimSpace(strings.ReplaceAll(string(cmdline), "\x00", " ")))
		}
	}
	return "a process this user cannot see"
}
