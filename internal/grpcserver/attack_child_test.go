package grpcserver

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The attack tests run the server in a child process (this test binary,
// started again with attackChildEnv set), so that its memory is its own:
// the child serves test.Attack until its standard input closes.

const attackChildEnv = "GRPCSERVER_ATTACK_CHILD"

// Limits of the server under attack.
const (
	attackMaxStreams = 100
	attackWriteLimit = time.Second // Keepalive.Timeout: a stalled write ends the connection
	slowHandler      = 200 * time.Millisecond
)

// attackStats is what the child reports of itself.
type attackStats struct {
	MaxHandlers int64 `json:"max_handlers"` // most handlers running at once since the last reset
	Goroutines  int   `json:"goroutines"`
}

type attackService interface{}

// attackDesc: Fast answers at once; Slow holds its handler for slow,
// whatever its context says (the worst handler: one that ignores a
// cancellation); Stats reports attackStats, and resets MaxHandlers.
func attackDesc(running, most *atomic.Int64, slow time.Duration) *grpc.ServiceDesc {
	handler := func(work func(ctx context.Context, in *wrapperspb.BytesValue) *wrapperspb.BytesValue) grpc.MethodHandler {
		return func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			n := running.Add(1)
			defer running.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			in := new(wrapperspb.BytesValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			return work(ctx, in), nil
		}
	}
	return &grpc.ServiceDesc{
		ServiceName: "test.Attack",
		HandlerType: (*attackService)(nil),
		Methods: []grpc.MethodDesc{
			{MethodName: "Fast", Handler: handler(func(_ context.Context, in *wrapperspb.BytesValue) *wrapperspb.BytesValue { return in })},
			{MethodName: "Slow", Handler: handler(func(_ context.Context, in *wrapperspb.BytesValue) *wrapperspb.BytesValue {
				time.Sleep(slow)
				return in
			})},
			{MethodName: "Stats", Handler: func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				if err := dec(new(wrapperspb.BytesValue)); err != nil {
					return nil, err
				}
				b, _ := json.Marshal(attackStats{MaxHandlers: most.Swap(running.Load()), Goroutines: runtime.NumGoroutine()})
				return wrapperspb.Bytes(b), nil
			}},
		},
	}
}

// runAttackChild serves test.Attack on the transport kind names, prints
// its address, and exits when its standard input closes.
func runAttackChild(kind string) {
	var running, most atomic.Int64
	slow := slowHandler
	if kind == "native-inline" {
		slow = 0 // an inline handler never waits: that is the contract of Options.Inline
	}
	desc := attackDesc(&running, &most, slow)
	ka := keepalive.ServerParameters{Timeout: attackWriteLimit}
	var srv interface {
		grpc.ServiceRegistrar
		Serve(net.Listener) error
		Stop()
	}
	switch kind {
	case "grpc-go":
		srv = grpc.NewServer(grpc.MaxConcurrentStreams(attackMaxStreams), grpc.KeepaliveParams(ka))
	case "native", "native-inline":
		srv = New(Options{Inline: kind == "native-inline", MaxConcurrentStreams: attackMaxStreams, Keepalive: ka})
	default:
		fmt.Fprintln(os.Stderr, "unknown transport", kind)
		os.Exit(2)
	}
	srv.RegisterService(desc, struct{}{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(lis.Addr().String())
	go func() { _ = srv.Serve(lis) }()
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	srv.Stop()
	os.Exit(0)
}

// attackChild is a running child server.
type attackChild struct {
	cmd  *exec.Cmd
	addr string
}

func startAttackChild(t *testing.T, kind string) *attackChild {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), attackChildEnv+"="+kind)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		t.Fatalf("attack child (%s) printed no address: %v", kind, err)
	}
	t.Cleanup(func() {
		_ = stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }() // how it exits is not the test's business
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Errorf("attack child (%s) did not stop within 10 s of being asked", kind)
		}
	})
	return &attackChild{cmd: cmd, addr: strings.TrimSpace(line)}
}

// rss is the child's resident set size in bytes.
func (a *attackChild) rss(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", a.cmd.Process.Pid))
	if err != nil {
		t.Fatalf("reading the child's RSS: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS %q: %v", rest, err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/PID/status")
	return 0
}

func (a *attackChild) stats(t *testing.T, cc *grpc.ClientConn) attackStats {
	t.Helper()
	out := new(wrapperspb.BytesValue)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cc.Invoke(ctx, "/test.Attack/Stats", wrapperspb.Bytes(nil), out); err != nil {
		t.Fatalf("Stats: %v", err)
	}
	var s attackStats
	if err := json.Unmarshal(out.Value, &s); err != nil {
		t.Fatal(err)
	}
	return s
}
