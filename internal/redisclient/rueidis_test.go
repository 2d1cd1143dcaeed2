package redisclient

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/internal/testutil"
)

// ping sends PING through c's main client.
func ping(ctx context.Context, cs *Clients) (string, error) {
	return cs.Main.Do(ctx, cs.Main.B().Ping().Build()).ToString()
}

// eventually waits up to 10 s for cond.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
	}
}

// TestOpenSpeaksToASingleServer opens a real rueidis client on a fake
// server: the credentials and the database reach the server in the
// handshake, the connection is counted, and a dropped connection is
// dialled again by the next call.
func TestOpenSpeaksToASingleServer(t *testing.T) {
	f := startFake(t, "", nil)
	x := target("redis://" + f.addr() + "/2")
	x.Auth = "alice:s3:cret"
	cs, err := Open(t.Context(), Options{Main: x})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if got, err := ping(t.Context(), cs); got != "PONG" || err != nil {
		t.Fatalf("PING = %q, %v", got, err)
	}
	cmds := f.commands()
	for _, want := range []string{"HELLO 3 AUTH alice s3:cret", "SELECT 2", "PING"} {
		if !slices.Contains(cmds, want) {
			t.Errorf("the server received %q, want %q among them", cmds, want)
		}
	}
	if slices.ContainsFunc(cmds, func(c string) bool { return strings.Contains(c, "TRACKING") || strings.HasPrefix(c, "CLUSTER") }) {
		t.Errorf("the server received %q: client-side caching or cluster discovery on a single target", cmds)
	}
	if !cs.Connected() {
		t.Errorf("Connected() = false with %d open connections", cs.OpenConnections())
	}
	f.dropAll()
	eventually(t, "the dropped connections uncounted", func() bool { return !cs.Connected() })
	eventually(t, "a call after the drop answered", func() bool {
		got, err := ping(t.Context(), cs)
		return got == "PONG" && err == nil
	})
	if !cs.Connected() {
		t.Error("Connected() = false after the connection was dialled again")
	}
}

func TestOpenUnixSocket(t *testing.T) {
	path := t.TempDir() + "/redis.sock"
	f := startFake(t, path, nil)
	x := target(path)
	x.SocketType, x.Auth = "unix", "s3cret"
	cs, err := Open(t.Context(), Options{Main: x})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if got, err := ping(t.Context(), cs); got != "PONG" || err != nil {
		t.Fatalf("PING over %s = %q, %v", path, got, err)
	}
	if cmds := f.commands(); !slices.Contains(cmds, "HELLO 3 AUTH default s3cret") {
		t.Errorf("the server received %q, want the password alone as default's", cmds)
	}
}

// TestOpenTLS: over TLS to a server whose certificate names another host,
// Open succeeds only with REDIS_TLS_SKIP_HOSTNAME_VERIFICATION, and a
// server of another CA is refused even then.
func TestOpenTLS(t *testing.T) {
	pki := testutil.NewPKI(t)
	elsewhere := pki.Authority.Issue(t, &x509.Certificate{
		Subject: pkix.Name{CommonName: "elsewhere"}, DNSNames: []string{"elsewhere.example"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}).TLS
	f := startFake(t, "", &elsewhere)
	once := Startup{Initial: time.Millisecond, Max: time.Millisecond, MaxElapsed: time.Nanosecond}
	strict := Options{Main: target("rediss://" + f.addr()), TLS: TLSFiles{CACert: pki.CAFile}, Startup: once}
	if cs, err := Open(t.Context(), strict); err == nil {
		cs.Close()
		t.Fatal("Open() to a certificate for another name succeeded without SkipHostnameVerification")
	}
	skip := strict
	skip.TLS.SkipHostnameVerification = true
	cs, err := Open(t.Context(), skip)
	if err != nil {
		t.Fatalf("Open() with SkipHostnameVerification = %v", err)
	}
	if got, err := ping(t.Context(), cs); got != "PONG" || err != nil {
		t.Errorf("PING over TLS = %q, %v", got, err)
	}
	cs.Close()

	rogueCert := testutil.NewAuthority(t, "another CA").IssueServer(t).TLS
	rogue := startFake(t, "", &rogueCert)
	skip.Main = target("rediss://" + rogue.addr())
	if cs, err := Open(t.Context(), skip); err == nil {
		cs.Close()
		t.Error("Open() to another CA's server succeeded with SkipHostnameVerification")
	}
}

func TestOpenPerSecondOnItsOwnServer(t *testing.T) {
	main, ps := startFake(t, "", nil), startFake(t, "", nil)
	pst := target(ps.addr())
	pst.Setting, pst.Auth = "REDIS_PERSECOND", "pspw"
	cs, err := Open(t.Context(), Options{Main: target(main.addr()), PerSecond: &pst})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if got, err := cs.PerSecond.Do(t.Context(), cs.PerSecond.B().Ping().Build()).ToString(); got != "PONG" || err != nil {
		t.Fatalf("per-second PING = %q, %v", got, err)
	}
	if !slices.Contains(ps.commands(), "HELLO 3 AUTH default pspw") || slices.Contains(main.commands(), "HELLO 3 AUTH default pspw") {
		t.Errorf("main got %q, per-second got %q: want the per-second password on the per-second server only", main.commands(), ps.commands())
	}
	if !cs.Connected() || cs.OpenConnections() < 2 {
		t.Errorf("Connected() = %v, OpenConnections() = %d; want both clients connected", cs.Connected(), cs.OpenConnections())
	}
}
