package redisclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/internal/testutil"
)

// tlsServer serves TLS with cert on a loopback port, completing each
// handshake (and reading until the client closes); it returns the port's
// address.
func tlsServer(t *testing.T, cert tls.Certificate, clientCAs *x509.CertPool) string {
	t.Helper()
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}}
	if clientCAs != nil {
		cfg.ClientCAs, cfg.ClientAuth = clientCAs, tls.RequireAndVerifyClientCert
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { _ = ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.(*tls.Conn).Handshake()
				_, _ = c.Read(make([]byte, 1))
			}()
		}
	}()
	return ln.Addr().String()
}

// handshake dials addr through the package's DialCtxFn with cfg.
func handshake(t *testing.T, addr string, cfg *tls.Config) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := dialFunc(SocketTCP, nil, nil)(ctx, addr, &net.Dialer{Timeout: 5 * time.Second}, cfg)
	if err == nil {
		_ = conn.Close()
	}
	return err
}

func TestTLSConfigVerifiesTheServer(t *testing.T) {
	pki := testutil.NewPKI(t)
	addr := tlsServer(t, pki.Server, nil)
	cfg, err := TLSFiles{CACert: pki.CAFile}.Config()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MinVersion != tls.VersionTLS12 || cfg.InsecureSkipVerify {
		t.Errorf("Config() = MinVersion %x, InsecureSkipVerify %v; want TLS 1.2, verified", cfg.MinVersion, cfg.InsecureSkipVerify)
	}
	if err := handshake(t, addr, cfg); err != nil {
		t.Errorf("handshake with the CA's server (127.0.0.1 in its SANs) = %v", err)
	}
	rogue := tlsServer(t, testutil.NewAuthority(t, "another CA").IssueServer(t).TLS, nil)
	if err := handshake(t, rogue, cfg); err == nil {
		t.Error("handshake with another CA's server succeeded, want a refusal")
	}
}

// TestSkipHostnameVerificationStillVerifiesTheChain: a certificate for
// another name from the CA passes only with SkipHostnameVerification; one
// from another CA never does.
func TestSkipHostnameVerificationStillVerifiesTheChain(t *testing.T) {
	pki := testutil.NewPKI(t)
	elsewhere := pki.Authority.Issue(t, &x509.Certificate{
		Subject: pkix.Name{CommonName: "elsewhere"}, DNSNames: []string{"elsewhere.example"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	addr := tlsServer(t, elsewhere.TLS, nil)
	strict, err := TLSFiles{CACert: pki.CAFile}.Config()
	if err != nil {
		t.Fatal(err)
	}
	if err := handshake(t, addr, strict); err == nil {
		t.Error("handshake with a certificate for another name succeeded without SkipHostnameVerification")
	}
	skip, err := TLSFiles{CACert: pki.CAFile, SkipHostnameVerification: true}.Config()
	if err != nil {
		t.Fatal(err)
	}
	if err := handshake(t, addr, skip); err != nil {
		t.Errorf("handshake with the CA's certificate for another name = %v, want success with SkipHostnameVerification", err)
	}
	rogue := tlsServer(t, testutil.NewAuthority(t, "another CA").IssueServer(t).TLS, nil)
	if err := handshake(t, rogue, skip); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("handshake with another CA's server = %v, want the chain refused", err)
	}
	clientOnly := pki.Authority.IssueClient(t, nil, testutil.ClientSAN) // not for server authentication
	if err := handshake(t, tlsServer(t, clientOnly.TLS, nil), skip); err == nil {
		t.Error("handshake with a client certificate as the server's succeeded, want refused")
	}
}

func TestTLSClientCertificate(t *testing.T) {
	pki := testutil.NewPKI(t)
	addr := tlsServer(t, pki.Server, pki.CA)
	without, err := TLSFiles{CACert: pki.CAFile}.Config()
	if err != nil {
		t.Fatal(err)
	}
	with, err := TLSFiles{CACert: pki.CAFile, ClientCert: pki.ClientCert, ClientKey: pki.ClientKey}.Config()
	if err != nil {
		t.Fatal(err)
	}
	if len(with.Certificates) != 1 {
		t.Fatalf("Config().Certificates = %d, want the client's", len(with.Certificates))
	}
	if err := handshake(t, addr, with); err != nil {
		t.Errorf("handshake with the client certificate = %v", err)
	}
	// TLS 1.3 reports a refused client certificate on the first read.
	if conn, err := dialFunc(SocketTCP, nil, nil)(context.Background(), addr, &net.Dialer{Timeout: 5 * time.Second}, without); err == nil {
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := conn.Read(make([]byte, 1)); err == nil {
			t.Error("a server requiring a client certificate answered a client without one")
		}
		_ = conn.Close()
	}
}

func TestTLSConfigErrorsNameTheSetting(t *testing.T) {
	pki := testutil.NewPKI(t)
	notPEM := filepath.Join(t.TempDir(), "empty.pem")
	if err := os.WriteFile(notPEM, []byte("nothing"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		f    TLSFiles
		want string
	}{
		{TLSFiles{ClientCert: pki.ClientCert}, "REDIS_TLS_CLIENT_KEY"},
		{TLSFiles{ClientKey: pki.ClientKey}, "REDIS_TLS_CLIENT_CERT"},
		{TLSFiles{ClientCert: pki.ClientCert, ClientKey: pki.ServerKey}, "REDIS_TLS_CLIENT_CERT"},
		{TLSFiles{CACert: filepath.Join(t.TempDir(), "missing.pem")}, "REDIS_TLS_CACERT"},
		{TLSFiles{CACert: notPEM}, "REDIS_TLS_CACERT"},
	} {
		if _, err := tt.f.Config(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v.Config() = %v, want an error naming %s", tt.f, err, tt.want)
		}
	}
}

func TestClientOptionTLS(t *testing.T) {
	pki := testutil.NewPKI(t)
	files := TLSFiles{CACert: pki.CAFile, SkipHostnameVerification: true}
	x := target("m,s1:26379")
	x.Type, x.TLS = "sentinel", true
	opt, err := x.ClientOption(files)
	if err != nil {
		t.Fatal(err)
	}
	if opt.TLSConfig == nil || opt.TLSConfig.RootCAs == nil || opt.TLSConfig.VerifyConnection == nil {
		t.Fatalf("TLSConfig = %+v, want the CA and the chain check", opt.TLSConfig)
	}
	if opt.Sentinel.TLSConfig != opt.TLSConfig {
		t.Error("Sentinel.TLSConfig differs from TLSConfig: the sentinels are reached over the same TLS")
	}
	if _, err := target("rediss://h:1").ClientOption(TLSFiles{CACert: "/nonexistent"}); err == nil || !strings.Contains(err.Error(), "REDIS_TLS_CACERT") {
		t.Errorf("ClientOption(rediss, missing CA) = %v, want an error naming REDIS_TLS_CACERT", err)
	}
	if _, err := target("h:1").ClientOption(TLSFiles{CACert: "/nonexistent"}); err != nil {
		t.Errorf("ClientOption(no TLS, missing CA) = %v: the files are read only for TLS", err)
	}
}
