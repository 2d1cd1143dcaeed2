package sidebyside

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Proc is a rate-limit binary running on free loopback ports.
type Proc struct {
	cmd *exec.Cmd
	out *lockedBuffer
	// GRPCAddr, HTTPAddr and PromAddr are its listeners (PromAddr is
	// PROMETHEUS_ADDR, whether or not it serves there).
	GRPCAddr, HTTPAddr, PromAddr string
	exited                       chan error
}

// Runtime returns the absolute RUNTIME_ROOT holding the scenarios' rules.
func Runtime() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("sidebyside: cannot locate the package")
	}
	return filepath.Join(filepath.Dir(file), "testdata", "runtime"), nil
}

// CommonEnv is the environment every scenario runs with: the rules under
// Runtime, no statsd, loopback listeners on the given ports.
func CommonEnv(root string, grpcPort, httpPort, debugPort, promPort int) []string {
	return []string{
		"RUNTIME_ROOT=" + root,
		"RUNTIME_SUBDIRECTORY=ratelimit",
		"RUNTIME_WATCH_ROOT=false",
		"USE_STATSD=false",
		"LOG_LEVEL=warn",
		"GRPC_HOST=127.0.0.1", "GRPC_PORT=" + strconv.Itoa(grpcPort),
		"HOST=127.0.0.1", "PORT=" + strconv.Itoa(httpPort),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT=" + strconv.Itoa(debugPort),
		"PROMETHEUS_ADDR=127.0.0.1:" + strconv.Itoa(promPort),
	}
}

// FreePort returns a loopback TCP port nothing listens on.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Start runs bin with args, CommonEnv on free ports and env added (later
// entries win), and waits until its /healthcheck answers 200.
func Start(bin string, args, env []string) (*Proc, error) {
	root, err := Runtime()
	if err != nil {
		return nil, err
	}
	var ports [4]int
	for i := range ports {
		if ports[i], err = FreePort(); err != nil {
			return nil, err
		}
	}
	p := &Proc{
		out:      &lockedBuffer{},
		GRPCAddr: fmt.Sprintf("127.0.0.1:%d", ports[0]),
		HTTPAddr: fmt.Sprintf("127.0.0.1:%d", ports[1]),
		PromAddr: fmt.Sprintf("127.0.0.1:%d", ports[3]),
		exited:   make(chan error, 1),
	}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(append(os.Environ(), CommonEnv(root, ports[0], ports[1], ports[2], ports[3])...), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("sidebyside: start %s: %w", bin, err)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + p.HTTPAddr + "/healthcheck")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, nil
			}
		}
		select {
		case err := <-p.exited:
			p.exited <- err
			return nil, fmt.Errorf("sidebyside: %s exited early: %w\n%s", bin, err, p.out.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	p.Stop()
	return nil, fmt.Errorf("sidebyside: %s not healthy within 20s:\n%s", bin, p.out.String())
}

// Output is what the binary printed so far.
func (p *Proc) Output() string { return p.out.String() }

// Stop kills the binary and waits for it.
func (p *Proc) Stop() {
	_ = p.cmd.Process.Kill()
	err := <-p.exited
	p.exited <- err
}

// Client dials target ("127.0.0.1:port" or "unix:///path") in plaintext.
func Client(target string) (pb.RateLimitServiceClient, func(), error) {
	cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, err
	}
	return pb.NewRateLimitServiceClient(cc), func() { _ = cc.Close() }, nil
}

// Scrape returns the exposition at url.
func Scrape(url string) (string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(b), nil
}

// RunScenario starts bin with the scenario's environment plus extra, plays
// it, and for a Scrape scenario returns the Prometheus series at its end.
func RunScenario(ctx context.Context, bin string, args []string, sc Scenario, extra ...string) ([]Answer, []string, string, error) {
	p, err := Start(bin, args, append(append([]string(nil), extra...), sc.Env...))
	if err != nil {
		return nil, nil, "", err
	}
	defer p.Stop()
	c, closeFn, err := Client(p.GRPCAddr)
	if err != nil {
		return nil, nil, p.Output(), err
	}
	defer closeFn()
	answers, err := Play(ctx, c, sc)
	if err != nil || !sc.Scrape {
		return answers, nil, p.Output(), err
	}
	// Both flush their stats on an interval (STATS_FLUSH_INTERVAL); wait
	// until two scrapes in a row agree.
	var last []string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(300 * time.Millisecond) {
		text, err := Scrape("http://" + p.PromAddr + "/metrics")
		if err != nil {
			continue
		}
		s := Series(text)
		if len(s) > 0 && fmt.Sprint(s) == fmt.Sprint(last) {
			return answers, s, p.Output(), nil
		}
		last = s
	}
	return answers, last, p.Output(), fmt.Errorf("sidebyside: %s: no stable scrape at %s within 10s", sc.Name, p.PromAddr)
}

// ProbeUDS starts bin with GRPC_UDS set and reports whether it answers over
// the socket and whether it also answers on GRPC_PORT.
func ProbeUDS(ctx context.Context, bin string, args []string, dir string, extra ...string) (UDS, string, error) {
	sock := filepath.Join(dir, "rl.sock")
	p, err := Start(bin, args, append(append([]string(nil), extra...), "GRPC_UDS="+sock))
	if err != nil {
		return UDS{}, "", err
	}
	defer p.Stop()
	ask := func(target string) bool {
		c, closeFn, err := Client(target)
		if err != nil {
			return false
		}
		defer closeFn()
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err = c.ShouldRateLimit(cctx, Step{Descs: []Desc{d("user", "uds")}}.Request())
		return err == nil
	}
	var u UDS
	for deadline := time.Now().Add(5 * time.Second); !u.AnsweredOverSocket && time.Now().Before(deadline); {
		if u.AnsweredOverSocket = ask("unix://" + sock); !u.AnsweredOverSocket {
			time.Sleep(100 * time.Millisecond)
		}
	}
	u.ListensOnGRPCPort = ask(p.GRPCAddr)
	return u, p.Output(), nil
}

// lockedBuffer is a bytes.Buffer safe for concurrent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
