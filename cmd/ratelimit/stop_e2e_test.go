package main

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dynalimit/dynalimit/internal/testutil"
)

// TestStopLeavesNoGoroutine: a service on DynamoDB under
// ON_UNAVAILABLE=local, served in this process, warmed up and counting its
// fleet by heartbeats, stops when its context ends (as on SIGTERM) and
// leaves no goroutine behind: the heartbeat, the settle-up, the namespace
// watch, the warm-up, the config watch, the store's and the server's have
// all ended. Only the idle connections of the AWS SDK's client, which has
// no Close, may stay.
func TestStopLeavesNoGoroutine(t *testing.T) {
	env := dynamoEnv(t, "ON_UNAVAILABLE=local", "BACKEND_TIMEOUT=2s", "LOG_LEVEL=info", "SHUTDOWN_DRAIN=100ms")
	dir := t.TempDir()
	writeConfig(t, dir, "e2e.yaml", e2eConfig)
	port := func() string { return strconv.Itoa(testutil.FreePort(t)) }
	httpPort := port()
	env = append(env, "GRPC_HOST=127.0.0.1", "GRPC_PORT="+port(), "HOST=127.0.0.1", "PORT="+httpPort, "DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+port())
	defer goleak.VerifyNone(t, append([]goleak.Option{goleak.IgnoreCurrent()}, idleConnections...)...)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out testutil.LockedBuffer
	exited := make(chan int, 1)
	go func() { exited <- Main(ctx, []string{"serve", "-config_dir", dir}, lookup(env), io.Discard, &out) }()

	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	ready := func() bool {
		resp, err := client.Get("http://127.0.0.1:" + httpPort + "/healthcheck")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	// Ready: warmed up. The fleet counted: the heartbeat has beaten, and
	// waits for its next beat.
	if !testutil.Eventually(time.Minute, func() bool { return ready() && strings.Contains(out.String(), "fleet size changed") }) {
		cancel()
		<-exited
		t.Fatalf("not ready with the fleet counted within a minute:\n%s", out.String())
	}

	cancel()
	select {
	case code := <-exited:
		if code != 0 {
			t.Errorf("serve = exit %d when its context ended, want 0:\n%s", code, out.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("serve still running 30 s after its context ended:\n%s", out.String())
	}
}
