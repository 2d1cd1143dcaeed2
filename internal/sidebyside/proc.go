package sidebyside

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"runtime"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/dynalimit/dynalimit/internal/testutil"
)

// Proc is a rate-limit binary running on free loopback ports.
type Proc struct {
	*testutil.Server
	// PromAddr is its PROMETHEUS_ADDR, whether or not it serves there.
	PromAddr string
}

// Runtime returns the absolute RUNTIME_ROOT holding the scenarios' rules.
func Runtime() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("sidebyside: cannot locate the package")
	}
	return filepath.Join(filepath.Dir(file), "testdata", "runtime"), nil
}

// CommonEnv is the environment every scenario runs with besides the
// listeners: the rules under Runtime, no statsd, Prometheus on promAddr.
func CommonEnv(root, promAddr string) []string {
	return []string{
		"RUNTIME_ROOT=" + root,
		"RUNTIME_SUBDIRECTORY=ratelimit",
		"RUNTIME_WATCH_ROOT=false",
		"USE_STATSD=false",
		"LOG_LEVEL=warn",
		"PROMETHEUS_ADDR=" + promAddr,
	}
}

// Start runs bin with args on free loopback ports, CommonEnv and env added
// (later entries win), and waits until its /healthcheck answers 200.
// Stop kills it.
func Start(bin string, args, env []string) (*Proc, error) {
	root, err := Runtime()
	if err != nil {
		return nil, err
	}
	prom, err := testutil.FindFreePort()
	if err != nil {
		return nil, err
	}
	p := &Proc{PromAddr: fmt.Sprintf("127.0.0.1:%d", prom)}
	p.Server, err = testutil.NewServer(testutil.ServerOptions{
		Bin: bin, Args: args, Env: append(CommonEnv(root, p.PromAddr), env...),
	})
	if err != nil {
		return nil, fmt.Errorf("sidebyside: %w", err)
	}
	return p, nil
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
	defer func() { _ = p.Stop() }()
	c, closeFn, err := Client(p.GRPCAddr())
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
	defer func() { _ = p.Stop() }()
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
	u.ListensOnGRPCPort = ask(p.GRPCAddr())
	return u, p.Output(), nil
}
