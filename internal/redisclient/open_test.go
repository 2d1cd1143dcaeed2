package redisclient

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/rueidis"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeClient is a rueidis.Client that only counts its Close.
type fakeClient struct {
	rueidis.Client
	closed *atomic.Int32
}

func (f fakeClient) Close() { f.closed.Add(1) }

// flaky fails its first n calls (returning a client with the error on
// odd calls, as a forced single client does) and records the options of
// each call.
type flaky struct {
	n      int
	calls  []rueidis.ClientOption
	closed atomic.Int32
}

func (f *flaky) newClient(opt rueidis.ClientOption) (rueidis.Client, error) {
	f.calls = append(f.calls, opt)
	if len(f.calls) <= f.n {
		if len(f.calls)%2 == 1 {
			return fakeClient{closed: &f.closed}, errors.New("dial tcp: connection refused")
		}
		return nil, errors.New("dial tcp: connection refused")
	}
	return fakeClient{closed: &f.closed}, nil
}

func TestOpenRetriesWithBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &flaky{n: 4}
		var waits []time.Duration
		o := Options{Main: target("r:6379"), Startup: Startup{Initial: time.Second, Max: 3 * time.Second},
			OnRetry: func(target string, err error, wait time.Duration) {
				if target != "redis single r:6379" || err == nil {
					t.Errorf("OnRetry(%q, %v)", target, err)
				}
				waits = append(waits, wait)
			},
			newClient: f.newClient}
		start := time.Now()
		cs, err := Open(t.Context(), o)
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		if len(f.calls) != 5 || len(waits) != 4 {
			t.Fatalf("%d attempts, %d waits; want 5, 4", len(f.calls), len(waits))
		}
		// 1s, 2s, 3s, 3s, each jittered down by up to half.
		for i, hi := range []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 3 * time.Second} {
			if waits[i] < hi/2 || waits[i] > hi {
				t.Errorf("wait %d = %s, want in [%s,%s]", i, waits[i], hi/2, hi)
			}
		}
		if took := time.Since(start); took < 9*time.Second/2 || took > 9*time.Second {
			t.Errorf("Open took %s, want the waits' sum", took)
		}
		if got := f.closed.Load(); got != 2 {
			t.Errorf("%d failed clients closed, want the 2 returned with their error", got)
		}
		if cs.PerSecond != nil {
			t.Error("PerSecond is set without REDIS_PERSECOND")
		}
	})
}

func TestOpenGivesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &flaky{n: 1 << 30}
		o := Options{Main: target("r:6379"), Startup: Startup{Initial: time.Second, Max: 2 * time.Second, MaxElapsed: 10 * time.Second}, newClient: f.newClient}
		_, err := Open(t.Context(), o)
		if err == nil || !strings.Contains(err.Error(), "not reachable after") || !strings.Contains(err.Error(), "connection refused") {
			t.Errorf("Open() = %v, want it to give up with the last error", err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		o.Startup.MaxElapsed = 0
		if _, err := Open(ctx, o); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Open(ctx ending) = %v, want the context's error", err)
		}
	})
}

func TestOpenPerSecond(t *testing.T) {
	f := &flaky{}
	ps := target("ps:6379")
	ps.Setting = "REDIS_PERSECOND"
	cs, err := Open(t.Context(), Options{Main: target("r:6379"), PerSecond: &ps, newClient: f.newClient})
	if err != nil {
		t.Fatal(err)
	}
	if cs.PerSecond == nil || len(f.calls) != 2 || f.calls[1].InitAddress[0] != "ps:6379" {
		t.Fatalf("PerSecond = %v after calls %v, want the second client on ps:6379", cs.PerSecond, f.calls)
	}
	cs.Close()
	if got := f.closed.Load(); got != 2 {
		t.Errorf("Close() closed %d clients, want 2", got)
	}
}

// TestOpenRefusesSettingsAtOnce: a wrong setting is an error before any
// connection, naming it; a per-second one too, and the main client is not
// opened.
func TestOpenRefusesSettingsAtOnce(t *testing.T) {
	f := &flaky{}
	bad := target("a:1,b:2")
	bad.Setting = "REDIS_PERSECOND"
	for _, o := range []Options{
		{Main: target("")},
		{Main: target("r:1"), PerSecond: &bad},
		{Main: target("rediss://r:1"), TLS: TLSFiles{CACert: "/nonexistent"}},
	} {
		o.newClient = f.newClient
		if _, err := Open(t.Context(), o); err == nil || !strings.Contains(err.Error(), "REDIS_") {
			t.Errorf("Open(%v) = %v, want an error naming the setting", o.Main, err)
		}
	}
	if len(f.calls) != 0 {
		t.Errorf("%d clients opened for wrong settings, want none", len(f.calls))
	}
}

func TestOpenPerSecondFailureClosesMain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &flaky{}
		ps := target("ps:6379")
		o := Options{Main: target("r:6379"), PerSecond: &ps, Startup: Startup{Initial: time.Second, Max: time.Second, MaxElapsed: time.Second},
			newClient: func(opt rueidis.ClientOption) (rueidis.Client, error) {
				if opt.InitAddress[0] == "ps:6379" {
					return nil, errors.New("refused")
				}
				return f.newClient(opt)
			}}
		if _, err := Open(t.Context(), o); err == nil {
			t.Fatal("Open() = nil error, want the per-second target's")
		}
		if got := f.closed.Load(); got != 1 {
			t.Errorf("main client closed %d times, want 1", got)
		}
	})
}

// TestConnectedCountsNodeConnections: the DialCtxFn counts connections to
// nodes until they close, and leaves the sentinels' out.
func TestConnectedCountsNodeConnections(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	cs := &Clients{mainConns: &connCount{}}
	if cs.Connected() {
		t.Error("Connected() with no connection = true")
	}
	addr := ln.Addr().String()
	dial := dialFunc(SocketTCP, cs.mainConns, []string{"sentinel:26379", addr + "-not"})
	d := &net.Dialer{Timeout: 5 * time.Second}
	c1, err := dial(t.Context(), addr, d, nil)
	if err != nil {
		t.Fatal(err)
	}
	c2, err := dial(t.Context(), addr, d, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := cs.OpenConnections(); n != 2 || !cs.Connected() {
		t.Errorf("OpenConnections() = %d, Connected() = %v; want 2, true", n, cs.Connected())
	}
	_ = c1.Close()
	_ = c1.Close() // counted once
	_ = c2.Close()
	if n := cs.OpenConnections(); n != 0 || cs.Connected() {
		t.Errorf("after Close: OpenConnections() = %d, Connected() = %v; want 0, false", n, cs.Connected())
	}
	sentinelDial := dialFunc(SocketTCP, cs.mainConns, []string{addr})
	c3, err := sentinelDial(t.Context(), addr, d, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if n := cs.OpenConnections(); n != 0 {
		t.Errorf("a sentinel's connection counted: OpenConnections() = %d", n)
	}
	cs.PerSecond, cs.perSecondConns = fakeClient{closed: &atomic.Int32{}}, &connCount{}
	cs.mainConns.n.Store(1)
	if cs.Connected() {
		t.Error("Connected() = true while the per-second client has no connection")
	}
}

func TestUnixDial(t *testing.T) {
	path := t.TempDir() + "/r.sock"
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			_ = c.Close()
		}
	}()
	x := target(path)
	x.SocketType = "unix"
	opt, err := x.ClientOption(TLSFiles{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := opt.DialCtxFn(t.Context(), opt.InitAddress[0], &opt.Dialer, opt.TLSConfig)
	if err != nil {
		t.Fatalf("DialCtxFn(%s) = %v", path, err)
	}
	_ = c.Close()
}
