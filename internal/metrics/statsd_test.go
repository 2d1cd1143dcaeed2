package metrics

import (
	"bufio"
	"net"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// statsdServer is a statsd server over TCP that keeps every line it reads.
type statsdServer struct {
	lis   net.Listener
	mu    sync.Mutex
	lines []string
	conns []net.Conn
	wg    sync.WaitGroup
}

func startStatsd(t *testing.T, addr string) *statsdServer {
	t.Helper()
	var lis net.Listener
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if lis, err = net.Listen("tcp", addr); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	s := &statsdServer{lis: lis}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					s.mu.Lock()
					s.lines = append(s.lines, sc.Text())
					s.mu.Unlock()
				}
			}()
		}
	}()
	t.Cleanup(s.stop)
	return s
}

func (s *statsdServer) stop() {
	_ = s.lis.Close()
	s.mu.Lock()
	for _, c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// wait returns the lines received once every one of want is among them, or
// what arrived within 10 s.
func (s *statsdServer) wait(want []string) []string {
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.mu.Lock()
		got := slices.Clone(s.lines)
		s.mu.Unlock()
		all := true
		for _, w := range want {
			all = all && slices.Contains(got, w)
		}
		if all || time.Now().After(deadline) {
			sort.Strings(got)
			return got
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestStatsdOverTCP: USE_STATSD sends envoyproxy/ratelimit's stat lines over
// TCP, as its gostats sink writes them: counters "|c" with the count since
// the last flush, response times "|ms" in whole milliseconds, EXTRA_TAGS as
// ".__key=value" suffixes.
func TestStatsdOverTCP(t *testing.T) {
	srv := startStatsd(t, "127.0.0.1:0")
	m, c, _ := runCompat(t, CompatOptions{StatsdAddr: srv.lis.Addr().String(), ExtraTags: map[string]string{"env": "prod"}})
	drive(t, m, c)
	c.Flush()
	want := []string{
		"ratelimit.service.rate_limit.rl.generic_key_demo.total_hits.__env=prod:4|c",
		"ratelimit.service.rate_limit.rl.generic_key_demo.over_limit.__env=prod:1|c",
		"ratelimit.service.rate_limit.rl.generic_key_demo.near_limit.__env=prod:1|c",
		"ratelimit.service.rate_limit.rl.generic_key_demo.within_limit.__env=prod:3|c",
		"ratelimit.service.rate_limit.rl.api_key.path_/v1.shadow_mode.__env=prod:2|c",
		"ratelimit_server.ShouldRateLimit.total_requests.__env=prod:3|c",
		"ratelimit_server.ShouldRateLimit.response_time.__env=prod:0|ms",
		"ratelimit.service.config_load_success.__env=prod:1|c",
	}
	got := srv.wait(want)
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("statsd did not receive %q; received:\n%s", w, strings.Join(got, "\n"))
		}
	}
	if n := strings.Count(strings.Join(got, "\n"), "response_time"); n != 3 {
		t.Errorf("%d response_time lines, want one per call (3)", n)
	}
}

// TestStatsdReconnects: the statsd server goes away and comes back on the
// same address; the stats flushed after that reach it.
func TestStatsdReconnects(t *testing.T) {
	srv := startStatsd(t, "127.0.0.1:0")
	addr := srv.lis.Addr().String()
	m, c, _ := runCompat(t, CompatOptions{StatsdAddr: addr})
	m.ObserveRule("rl.before", RuleHits{Total: 1, WithinLimit: 1})
	c.Flush()
	srv.wait([]string{"ratelimit.service.rate_limit.rl.before.total_hits:1|c"})
	srv.stop()

	back := startStatsd(t, addr)
	// Writes to the closed connection fail and make the sink reconnect;
	// keep counting until the server that came back hears of it.
	deadline := time.Now().Add(20 * time.Second)
	for {
		m.ObserveRule("rl.after", RuleHits{Total: 1, WithinLimit: 1})
		c.Flush()
		back.mu.Lock()
		n := len(back.lines)
		back.mu.Unlock()
		if n > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	got := back.wait([]string{"ratelimit.service.rate_limit.rl.after.total_hits:1|c"})
	if !slices.Contains(got, "ratelimit.service.rate_limit.rl.after.total_hits:1|c") {
		t.Errorf("the restarted statsd server received %v, want the hits counted after it came back", got)
	}
}

// TestStatsdAwayNeverBlocks: with nothing listening at the statsd address,
// counting, flushing and scraping return at once.
func TestStatsdAwayNeverBlocks(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close() // nothing listens there now
	m, c, g := runCompat(t, CompatOptions{StatsdAddr: addr})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 2000 {
			m.ObserveRule("rl.away", RuleHits{Total: 1, WithinLimit: 1})
			c.Flush()
		}
		_, _ = g.Gather()
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("counting and flushing with statsd away did not return within 10 s")
	}
}

func TestStatsdRejectsBadProtocol(t *testing.T) {
	if _, err := statsdSink(CompatOptions{StatsdAddr: "127.0.0.1:8125", StatsdProtocol: "quic"}); err == nil {
		t.Error("statsdSink(quic) = nil error, want one")
	}
	t.Setenv("GOSTATS_FLUSH_INTERVAL_SECONDS", "soon")
	if _, err := statsdSink(CompatOptions{StatsdAddr: "127.0.0.1:8125"}); err == nil || !strings.Contains(err.Error(), "GOSTATS_FLUSH_INTERVAL_SECONDS") {
		t.Errorf("statsdSink with GOSTATS_FLUSH_INTERVAL_SECONDS=soon = %v, want an error naming it", err)
	}
}
