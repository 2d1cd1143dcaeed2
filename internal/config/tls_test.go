package config

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/dynalimit/dynalimit/internal/testutil"
)

// serialOf returns the serial number a handshake identifies l by.
func serialOf(l testutil.Leaf) int64 { return l.TLS.Leaf.SerialNumber.Int64() }

// replaceFile writes data beside path and renames it over path, as a
// rotation tool does.
func replaceFile(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// tlsFiles lays out cert, key and (optionally) client CA files.
type tlsFiles struct{ cert, key, ca string }

func writeTLSFiles(t *testing.T, server testutil.Leaf, clientCA *testutil.Authority) tlsFiles {
	t.Helper()
	dir := t.TempDir()
	f := tlsFiles{cert: filepath.Join(dir, "tls.crt"), key: filepath.Join(dir, "tls.key")}
	replaceFile(t, f.cert, server.CertPEM)
	replaceFile(t, f.key, server.KeyPEM)
	if clientCA != nil {
		f.ca = filepath.Join(dir, "ca.crt")
		replaceFile(t, f.ca, clientCA.PEM)
	}
	return f
}

func (f tlsFiles) settings(san string) Settings {
	s := Defaults()
	s.GRPCServerUseTLS = true
	s.GRPCServerTLSCert, s.GRPCServerTLSKey = f.cert, f.key
	s.GRPCClientTLSCACert, s.GRPCClientTLSSAN = f.ca, san
	return s
}

// tlsServer accepts TLS connections on loopback, handshakes, writes "ok"
// and closes; it reports each server-side handshake result.
type tlsServer struct {
	ln      net.Listener
	results chan error
	wg      sync.WaitGroup
}

func serveTLS(t *testing.T, cfg *tls.Config) *tlsServer {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &tlsServer{ln: tls.NewListener(raw, cfg), results: make(chan error, 64)}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := s.ln.Accept()
			if err != nil {
				return
			}
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				err := c.(*tls.Conn).Handshake()
				s.results <- err
				if err == nil {
					_, _ = c.Write([]byte("ok\n"))
				}
			}()
		}
	}()
	t.Cleanup(func() {
		s.ln.Close()
		s.wg.Wait()
	})
	return s
}

// dial handshakes as a client trusting serverCA, presenting cert if not
// nil, and returns the server certificate's serial, the client's error
// (which, under TLS 1.3, shows a rejection only on the first read) and the
// server's handshake error.
func (s *tlsServer) dial(t *testing.T, serverCA *testutil.Authority, cert *tls.Certificate) (serial int64, clientErr, serverErr error) {
	t.Helper()
	cfg := &tls.Config{RootCAs: serverCA.Pool(), ServerName: "localhost", MinVersion: tls.VersionTLS12}
	if cert != nil {
		// Always present cert, even when the server's acceptable-CA list
		// does not name its issuer, so that the server is the one to judge.
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
	}
	d := &net.Dialer{Timeout: 5 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", s.ln.Addr().String(), cfg)
	if err == nil {
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		serial = c.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
		var line string
		line, err = bufio.NewReader(c).ReadString('\n')
		if err == nil && line != "ok\n" {
			err = &net.OpError{Op: "read", Err: os.ErrInvalid}
		}
		c.Close()
	}
	select {
	case serverErr = <-s.results:
	case <-time.After(5 * time.Second):
		t.Fatalf("server reported no handshake within 5s")
	}
	return serial, err, serverErr
}

func TestServerTLSDisabled(t *testing.T) {
	cfg, w, err := ServerTLS(Defaults(), nullLogger())
	if cfg != nil || w != nil || err != nil {
		t.Errorf("ServerTLS(TLS off) = %v, %v, %v, want nil, nil, nil", cfg, w, err)
	}
}

func TestServerTLSErrors(t *testing.T) {
	ca := testutil.NewAuthority(t, "server-ca")
	other := ca.IssueServer(t)
	good := writeTLSFiles(t, ca.IssueServer(t), nil)
	dir := t.TempDir()
	mismatchedKey := filepath.Join(dir, "other.key")
	replaceFile(t, mismatchedKey, other.KeyPEM)
	noPEM := filepath.Join(dir, "empty.crt")
	replaceFile(t, noPEM, []byte("not a certificate\n"))

	tests := []struct {
		name string
		mod  func(*Settings)
		want string
	}{
		{"missing cert", func(s *Settings) { s.GRPCServerTLSCert = filepath.Join(dir, "missing.crt") }, "read"},
		{"no cert named", func(s *Settings) { s.GRPCServerTLSCert = "" }, "required"},
		{"key does not match", func(s *Settings) { s.GRPCServerTLSKey = mismatchedKey }, "key pair"},
		{"client CA without PEM", func(s *Settings) { s.GRPCClientTLSCACert = noPEM }, "no PEM certificates"},
		{"SAN without client CA", func(s *Settings) { s.GRPCClientTLSSAN = "client" }, "client CA"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := good.settings("")
			tt.mod(&s)
			cfg, w, err := ServerTLS(s, nullLogger())
			if cfg != nil || w != nil || err == nil || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "config: tls: ") {
				t.Errorf("ServerTLS() = %v, %v, %v, want nil, nil and a config: tls: error containing %q", cfg, w, err, tt.want)
			}
		})
	}
}

func TestServerTLSRotation(t *testing.T) {
	ca := testutil.NewAuthority(t, "server-ca")
	first := ca.IssueServer(t)
	files := writeTLSFiles(t, first, nil)
	cfg, w, err := ServerTLS(files.settings(""), nullLogger())
	if err != nil {
		t.Fatalf("ServerTLS() error = %v", err)
	}
	if cfg.ClientAuth != tls.NoClientCert {
		t.Errorf("ClientAuth = %v, want NoClientCert without a client CA", cfg.ClientAuth)
	}
	srv := serveTLS(t, cfg)
	if serial, cerr, serr := srv.dial(t, ca, nil); cerr != nil || serr != nil || serial != serialOf(first) {
		t.Fatalf("handshake = serial %d, client %v, server %v, want serial %d and no errors", serial, cerr, serr, serialOf(first))
	}

	// A rotation: new pair written, then checked.
	next := ca.IssueServer(t)
	replaceFile(t, files.key, next.KeyPEM)
	if err := w.Check(); err == nil {
		t.Errorf("Check() with the new key and the old certificate = nil, want a mismatch error")
	}
	if serial, _, _ := srv.dial(t, ca, nil); serial != serialOf(first) {
		t.Errorf("serial during a half-written rotation = %d, want the old %d", serial, serialOf(first))
	}
	replaceFile(t, files.cert, next.CertPEM)
	if err := w.Check(); err != nil {
		t.Fatalf("Check() after rotation = %v, want nil", err)
	}
	if serial, cerr, serr := srv.dial(t, ca, nil); cerr != nil || serr != nil || serial != serialOf(next) {
		t.Errorf("handshake after rotation = serial %d, client %v, server %v, want serial %d", serial, cerr, serr, serialOf(next))
	}
	if err := w.Check(); err != nil {
		t.Errorf("Check() with unchanged files = %v, want nil", err)
	}

	// A bad update keeps the serving pair.
	replaceFile(t, files.cert, []byte("garbage"))
	if err := w.Check(); err == nil {
		t.Errorf("Check() of a garbage certificate = nil, want an error")
	}
	if serial, cerr, _ := srv.dial(t, ca, nil); cerr != nil || serial != serialOf(next) {
		t.Errorf("handshake after a bad update = serial %d, %v, want serial %d", serial, cerr, serialOf(next))
	}
}

func TestCertWatcherRun(t *testing.T) {
	ca := testutil.NewAuthority(t, "server-ca")
	files := writeTLSFiles(t, ca.IssueServer(t), nil)
	logger, hook := logtest.NewNullLogger()
	w, err := NewCertWatcher(CertWatcherOptions{CertFile: files.cert, KeyFile: files.key, Interval: 10 * time.Millisecond, Logger: logrus.NewEntry(logger)})
	if err != nil {
		t.Fatalf("NewCertWatcher() error = %v", err)
	}
	srv := serveTLS(t, w.TLSConfig())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run() = %v, want nil", err)
		}
	}()

	// A bad certificate for many ticks is logged once.
	replaceFile(t, files.cert, []byte("garbage"))
	time.Sleep(200 * time.Millisecond)
	var bad int
	for _, e := range hook.AllEntries() {
		if e.Level == logrus.ErrorLevel {
			bad++
		}
	}
	if bad != 1 {
		t.Errorf("error entries for one bad update over many ticks = %d, want 1", bad)
	}

	// Then a good rotation is picked up by the ticker.
	next := ca.IssueServer(t)
	replaceFile(t, files.key, next.KeyPEM)
	replaceFile(t, files.cert, next.CertPEM)
	deadline := time.Now().Add(5 * time.Second)
	for {
		serial, cerr, serr := srv.dial(t, ca, nil)
		if cerr != nil || serr != nil {
			t.Fatalf("handshake = client %v, server %v, want none", cerr, serr)
		}
		if serial == serialOf(next) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("serial = %d 5s after rotation, want %d", serial, serialOf(next))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestMTLS(t *testing.T) {
	serverCA := testutil.NewAuthority(t, "server-ca")
	clientCA := testutil.NewAuthority(t, "client-ca")
	rogueCA := testutil.NewAuthority(t, "rogue-ca")
	const san = "spiffe://cluster.local/ns/envoy/sa/gateway"
	good := clientCA.IssueClient(t, nil, san)
	wrongSAN := clientCA.IssueClient(t, []string{"someone-else"})
	rogue := rogueCA.IssueClient(t, nil, san)

	files := writeTLSFiles(t, serverCA.IssueServer(t), clientCA)
	cfg, w, err := ServerTLS(files.settings(san), nullLogger())
	if err != nil {
		t.Fatalf("ServerTLS() error = %v", err)
	}
	if cfg.ClientAuth != tls.RequireAndVerifyClientCert {
		t.Errorf("ClientAuth = %v, want RequireAndVerifyClientCert", cfg.ClientAuth)
	}
	srv := serveTLS(t, cfg)

	tests := []struct {
		name    string
		cert    *tls.Certificate
		wantErr string // substring of the server's handshake error; "" accepts
	}{
		{"no client certificate", nil, "certificate"},
		{"certificate from another CA", &rogue.TLS, "unknown authority"},
		{"certificate without the SAN", &wrongSAN.TLS, "lacks SAN"},
		{"good certificate", &good.TLS, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, cerr, serr := srv.dial(t, serverCA, tt.cert)
			if tt.wantErr == "" {
				if cerr != nil || serr != nil {
					t.Errorf("handshake = client %v, server %v, want accepted", cerr, serr)
				}
				return
			}
			if serr == nil || !strings.Contains(serr.Error(), tt.wantErr) {
				t.Errorf("server handshake error = %v, want one containing %q", serr, tt.wantErr)
			}
			if cerr == nil {
				t.Errorf("client saw no error, want the rejection")
			}
		})
	}

	// Rotating the client CA: the rogue CA becomes the trusted one.
	replaceFile(t, files.ca, rogueCA.PEM)
	if err := w.Check(); err != nil {
		t.Fatalf("Check() after CA rotation = %v", err)
	}
	if _, cerr, serr := srv.dial(t, serverCA, &rogue.TLS); cerr != nil || serr != nil {
		t.Errorf("handshake with the newly trusted CA = client %v, server %v, want accepted", cerr, serr)
	}
	if _, _, serr := srv.dial(t, serverCA, &good.TLS); serr == nil || !strings.Contains(serr.Error(), "unknown authority") {
		t.Errorf("handshake with the retired CA: server error %v, want unknown authority", serr)
	}
}

// TestGRPCOverReloadableTLS checks the config works as gRPC credentials
// (ALPN h2 through GetConfigForClient) with mTLS, end to end on loopback.
func TestGRPCOverReloadableTLS(t *testing.T) {
	serverCA := testutil.NewAuthority(t, "server-ca")
	clientCA := testutil.NewAuthority(t, "client-ca")
	client := clientCA.IssueClient(t, []string{"envoy"})
	files := writeTLSFiles(t, serverCA.IssueServer(t), clientCA)
	cfg, _, err := ServerTLS(files.settings("envoy"), nullLogger())
	if err != nil {
		t.Fatalf("ServerTLS() error = %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.Creds(credentials.NewTLS(cfg)))
	healthpb.RegisterHealthServer(gs, health.NewServer())
	served := make(chan error, 1)
	go func() { served <- gs.Serve(ln) }()
	defer func() {
		gs.Stop()
		if err := <-served; err != nil {
			t.Errorf("Serve() = %v", err)
		}
	}()

	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		RootCAs:      serverCA.Pool(),
		ServerName:   "localhost",
		Certificates: []tls.Certificate{client.TLS},
	})))
	if err != nil {
		t.Fatalf("grpc.NewClient() error = %v", err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("Health.Check() = %v, %v, want SERVING", resp, err)
	}
}

func TestHasSAN(t *testing.T) {
	u, _ := url.Parse("spiffe://td/ns/a")
	c := &x509.Certificate{
		DNSNames:       []string{"envoy.local"},
		EmailAddresses: []string{"ops@example.com"},
		URIs:           []*url.URL{u},
		IPAddresses:    []net.IP{net.ParseIP("10.1.2.3")},
	}
	tests := []struct {
		san  string
		want bool
	}{
		{"envoy.local", true},
		{"ops@example.com", true},
		{"spiffe://td/ns/a", true},
		{"10.1.2.3", true},
		{"envoy", false},
		{"spiffe://td/ns", false},
		{"", false},
	}
	for _, tt := range tests {
		if got := hasSAN(c, tt.san); got != tt.want {
			t.Errorf("hasSAN(%q) = %v, want %v", tt.san, got, tt.want)
		}
	}
}
