package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// testPKI is a CA with a server certificate for 127.0.0.1 and a client
// certificate, written as PEM files.
type testPKI struct {
	ca                    *x509.CertPool
	caFile                string
	serverCert, serverKey string
	client                tls.Certificate
	// clientCert and clientKey are the client certificate's PEM files.
	clientCert, clientKey string
}

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	issue := func(serial int64, usage x509.ExtKeyUsage, ips []net.IP) ([]byte, []byte) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "test"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: ips, KeyUsage: x509.KeyUsageDigitalSignature,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	}
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	pki := testPKI{ca: x509.NewCertPool(), caFile: write("ca.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}))}
	pki.ca.AddCert(caCert)
	sc, sk := issue(2, x509.ExtKeyUsageServerAuth, []net.IP{net.ParseIP("127.0.0.1")})
	pki.serverCert, pki.serverKey = write("server.pem", sc), write("server-key.pem", sk)
	cc, ck := issue(3, x509.ExtKeyUsageClientAuth, nil)
	pki.clientCert, pki.clientKey = write("client.pem", cc), write("client-key.pem", ck)
	if pki.client, err = tls.X509KeyPair(cc, ck); err != nil {
		t.Fatal(err)
	}
	return pki
}

// TestBinaryServesMutualTLS: with GRPC_SERVER_USE_TLS and a client CA, a
// client with a certificate is answered and one without is refused.
func TestBinaryServesMutualTLS(t *testing.T) {
	pki := newTestPKI(t)
	dir := t.TempDir()
	writeConfig(t, dir, "e2e.yaml", e2eConfig)
	p := startBinary(t, dir,
		"GRPC_SERVER_USE_TLS=true",
		"GRPC_SERVER_TLS_CERT="+pki.serverCert,
		"GRPC_SERVER_TLS_KEY="+pki.serverKey,
		"GRPC_CLIENT_TLS_CACERT="+pki.caFile,
	)
	call := func(cfg *tls.Config) error {
		cc, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		if err != nil {
			return err
		}
		defer cc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = pb.NewRateLimitServiceClient(cc).ShouldRateLimit(ctx, &pb.RateLimitRequest{
			Domain: "e2e", Descriptors: []*rlv3.RateLimitDescriptor{descriptor("generic_key", "plenty")},
		})
		return err
	}
	if err := call(&tls.Config{RootCAs: pki.ca, Certificates: []tls.Certificate{pki.client}, MinVersion: tls.VersionTLS12}); err != nil {
		t.Errorf("call with a client certificate = %v, want answered", err)
	}
	if err := call(&tls.Config{RootCAs: pki.ca, MinVersion: tls.VersionTLS12}); err == nil {
		t.Error("call without a client certificate was answered, want refused (mTLS)")
	}
}
