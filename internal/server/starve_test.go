package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/dynalimit/dynalimit/internal/testutil"
)

// The helper process: when DYNALIMIT_STARVE_HELPER is set, this test binary
// serves with an open-file limit of 256, prints its addresses and serves
// until its stdin closes.
func TestMain_starveHelper(t *testing.T) {
	if os.Getenv("DYNALIMIT_STARVE_HELPER") == "" {
		t.Skip("helper process for TestHalfSentRequestsCannotStarveGRPC")
	}
	rl := syscall.Rlimit{Cur: 256, Max: 256}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatalf("setrlimit: %v", err)
	}
	log := logrus.New()
	log.SetFormatter(&logrus.JSONFormatter{})
	log.SetOutput(os.Stderr)
	s, err := New(Options{
		GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", DebugAddr: "127.0.0.1:0",
		RateLimit: &okRLS{},
		JSON: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if _, err := io.ReadAll(r.Body); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
			}
		}),
		ReadHeaderTimeout: time.Second,
		ReadTimeout:       time.Second,
		IdleTimeout:       time.Second,
		Logger:            logrus.NewEntry(log),
	})
	if err != nil {
		t.Fatalf("New() error = %v", err)
	}
	g, h, _ := s.Addrs()
	fmt.Printf("%s %s %d\n", g, h, DefaultMaxConnections())
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	if err := s.Run(ctx); err != nil {
		t.Fatalf("Run() error = %v", err)
	}
}

// TestHalfSentRequestsCannotStarveGRPC: 300 connections that send half a
// POST (and 100 that send half their headers) to a server limited to 256
// open files. gRPC keeps answering throughout, and the read timeouts close
// every stalled connection, including those that waited for a slot.
func TestHalfSentRequestsCannotStarveGRPC(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a helper process")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestMain_starveHelper$", "-test.v=false")
	cmd.Env = append(os.Environ(), "DYNALIMIT_STARVE_HELPER=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr testutil.LockedBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start helper: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = stdin.Close()
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("helper process: %v", err)
			}
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("helper process did not stop: %v", <-exited)
		}
	}()
	var grpcAddr, httpAddr string
	var maxConns int
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if _, serr := fmt.Sscan(line, &grpcAddr, &httpAddr, &maxConns); err != nil || serr != nil {
		t.Fatalf("helper said %q (%v, %v); stderr:\n%s", line, err, serr, stderr.String())
	}
	if maxConns != 64 {
		t.Errorf("DefaultMaxConnections() at 256 open files = %d, want 64", maxConns)
	}

	// 300 half-sent bodies and 100 half-sent headers.
	var conns []net.Conn
	for i := range 400 {
		c, err := net.Dial("tcp", httpAddr)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		conns = append(conns, c)
		req := "POST /json HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{\"domain\":"
		if i >= 300 {
			req = "POST /json HTTP/1.1\r\nHost: x\r\nContent-Le"
		}
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()

	// The stalled connections are closed by the server: reads end.
	var wg sync.WaitGroup
	closed := make([]bool, len(conns))
	for i, c := range conns {
		wg.Go(func() {
			_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
			_, err := io.Copy(io.Discard, c)
			closed[i] = err == nil // EOF: the server closed it
		})
	}

	// Meanwhile gRPC answers, every time, promptly. (Without the connection
	// bound, the first second of stalls takes every file the helper may
	// open, and these calls time out.)
	cc, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := pb.NewRateLimitServiceClient(cc)
	for i := range 40 {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		_, err := client.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "d"})
		cancel()
		if err != nil {
			t.Fatalf("ShouldRateLimit call %d while HTTP is stalled: %v", i, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	wg.Wait()
	open := 0
	for _, ok := range closed {
		if !ok {
			open++
		}
	}
	if open > 0 {
		t.Errorf("%d of %d stalled connections were not closed by the server", open, len(conns))
	}
	// Timeouts are logged through the JSON logger, never as plain text.
	for _, l := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
		if l == "" || strings.HasPrefix(l, "=== ") || strings.HasPrefix(l, "--- ") || l == "PASS" {
			continue
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			t.Errorf("helper log line is not JSON: %q", l)
		}
	}
}
