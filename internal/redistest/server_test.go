package redistest

import (
	"crypto/tls"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestStart: a server answers, counts its commands, keeps nothing on
// disk, and reports its pid.
func TestStart(t *testing.T) {
	began := time.Now()
	s := Start(t, Options{})
	t.Logf("%s ready in %v (%s)", s.Addr(), time.Since(began), s.Binaries().Version)
	if got := s.MustDo("SET", "k", "v"); got != "OK" {
		t.Fatalf("SET: %v", got)
	}
	if got := s.MustDo("MGET", "k", "missing"); !equal(got, []any{"v", nil}) {
		t.Fatalf("MGET: %#v", got)
	}
	if got := s.MustDo("INCRBY", "n", "5"); got != int64(5) {
		t.Fatalf("INCRBY: %#v", got)
	}
	var re ReplyError
	if _, err := s.Do("NOSUCHCOMMAND"); !errors.As(err, &re) || !strings.HasPrefix(string(re), "ERR") {
		t.Fatalf("an unknown command: %v", err)
	}
	if got := s.CommandStats(); got["set"] != 1 || got["mget"] != 1 || got["incrby"] != 1 {
		t.Fatalf("commandstats: %v", got)
	}
	cfg := s.MustDo("CONFIG", "GET", "save")
	if !equal(cfg, []any{"save", ""}) {
		t.Fatalf("CONFIG GET save: %#v", cfg)
	}
	if got := s.Info("persistence")["aof_enabled"]; got != "0" {
		t.Fatalf("aof_enabled %q", got)
	}
	if out := s.CLI("GET", "k"); strings.TrimSpace(out) != "v" {
		t.Fatalf("redis-cli GET: %q", out)
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(s.Pid()) + "/status"); err != nil {
		t.Fatalf("pid %d: %v", s.Pid(), err)
	}
	s.MustDo("FLUSHALL")
	if got := s.MustDo("DBSIZE"); got != int64(0) {
		t.Fatalf("DBSIZE after FLUSHALL: %v", got)
	}
}

// TestRestart: a server stopped (or killed) starts again on its port,
// empty.
func TestRestart(t *testing.T) {
	s := Start(t, Options{})
	s.MustDo("SET", "k", "v")
	pid := s.Pid()
	s.Stop()
	if _, err := s.Do("PING"); err == nil {
		t.Fatal("a stopped server answered")
	}
	s.Start()
	if s.Pid() == pid {
		t.Fatal("the same pid after a restart")
	}
	if got := s.MustDo("GET", "k"); got != nil {
		t.Fatalf("a key survived the restart: %v", got)
	}
	s.Kill()
	s.Start()
	if got := s.MustDo("PING"); got != "PONG" {
		t.Fatalf("PING after kill and start: %v", got)
	}
	if n := strings.Count(s.Output(), "Ready to accept connections"); n != 3 {
		t.Fatalf("the output holds %d starts, not 3", n)
	}
}

// TestFreeze: a frozen server accepts nothing until thawed; its open
// connections then get their answers.
func TestFreeze(t *testing.T) {
	s := Start(t, Options{})
	c, err := s.Dial()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s.Freeze()
	frozen, err := Dial(DialConfig{Addr: s.Addr(), Timeout: 200 * time.Millisecond})
	if err == nil {
		// The kernel accepts the connection; the frozen server never answers.
		_, err = frozen.Do("PING")
		_ = frozen.Close()
	}
	if err == nil {
		t.Fatal("a frozen server answered")
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.Do("PING")
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	s.Thaw()
	if err := <-done; err != nil {
		t.Fatalf("PING across the freeze: %v", err)
	}
	s.Freeze() // the cleanup thaws it to stop it
}

// TestAuth: the password, and the ACL user, are required.
func TestAuth(t *testing.T) {
	for _, o := range []Options{{Password: "secret"}, {User: "limiter", Password: "secret"}} {
		s := Start(t, o)
		if _, err := Dial(DialConfig{Addr: s.Addr()}); err != nil {
			t.Fatal(err)
		}
		if _, err := (&DialConfig{Addr: s.Addr()}).do("PING"); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
			t.Fatalf("%+v: PING without auth: %v", o, err)
		}
		if _, err := Dial(DialConfig{Addr: s.Addr(), User: o.User, Password: "wrong"}); err == nil {
			t.Fatalf("%+v: a wrong password was taken", o)
		}
		if got := s.MustDo("PING"); got != "PONG" {
			t.Fatalf("%+v: PING: %v", o, got)
		}
		if got := s.CLI("PING"); strings.TrimSpace(got) != "PONG" {
			t.Fatalf("%+v: redis-cli PING: %q", o, got)
		}
	}
}

// TestTLS: the server speaks TLS only and wants a client certificate of
// its CA.
func TestTLS(t *testing.T) {
	s := Start(t, Options{TLS: true})
	if got := s.MustDo("PING"); got != "PONG" {
		t.Fatalf("PING over TLS: %v", got)
	}
	if got := s.CLI("PING"); strings.TrimSpace(got) != "PONG" {
		t.Fatalf("redis-cli --tls PING: %q", got)
	}
	p := s.Options().PKI
	noCert := &tls.Config{RootCAs: p.CA, MinVersion: tls.VersionTLS12}
	if _, err := (&DialConfig{Addr: s.Addr(), TLS: noCert}).do("PING"); err == nil {
		t.Fatal("a client without a certificate was served")
	}
	rogue, err := tls.LoadX509KeyPair(p.RogueCert, p.RogueKey)
	if err != nil {
		t.Fatal(err)
	}
	other := &tls.Config{RootCAs: p.CA, Certificates: []tls.Certificate{rogue}, MinVersion: tls.VersionTLS12}
	if _, err := (&DialConfig{Addr: s.Addr(), TLS: other}).do("PING"); err == nil {
		t.Fatal("a client certificate of another CA was taken")
	}
	if _, err := (&DialConfig{Addr: s.Addr()}).do("PING"); err == nil {
		t.Fatal("a plain client was served")
	}
}

// do dials, runs one command and closes.
func (d *DialConfig) do(args ...string) (any, error) {
	if d.Timeout == 0 {
		d.Timeout = 2 * time.Second
	}
	c, err := Dial(*d)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.Do(args...)
}

func equal(a, b any) bool {
	x, ok1 := a.([]any)
	y, ok2 := b.([]any)
	if !ok1 || !ok2 {
		return a == b
	}
	if len(x) != len(y) {
		return false
	}
	for i := range x {
		if !equal(x[i], y[i]) {
			return false
		}
	}
	return true
}
