package envoytest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// PKI is a test certificate authority with a server certificate for the
// service and client certificates for Envoy, written as PEM files.
type PKI struct {
	// CA is the authority's certificate; ServerCert/ServerKey are the
	// service's (DNS ratelimit, IP 127.0.0.1); ClientCert/ClientKey are
	// Envoy's (URI spiffe://dynalimit.test/envoy).
	CA, ServerCert, ServerKey, ClientCert, ClientKey string
	// RogueCert/RogueKey are a client certificate with the same identity
	// issued by another authority: a server trusting CA must refuse it.
	RogueCert, RogueKey string
}

// ClientSAN is the URI SAN of the PKI's client certificates.
const ClientSAN = "spiffe://dynalimit.test/envoy"

// NewPKI issues the certificates into a temporary directory.
func NewPKI(t testing.TB) PKI {
	t.Helper()
	dir := t.TempDir()
	write := func(name string, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	keyDER := func(k *ecdsa.PrivateKey) []byte {
		der, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return der
	}
	newCA := func(name string) (*x509.Certificate, *ecdsa.PrivateKey, []byte) {
		k := newKey()
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
			IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
		if err != nil {
			t.Fatal(err)
		}
		c, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		return c, k, der
	}
	issue := func(ca *x509.Certificate, caKey *ecdsa.PrivateKey, serial int64, tmpl *x509.Certificate) ([]byte, []byte) {
		k := newKey()
		tmpl.SerialNumber = big.NewInt(serial)
		tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return der, keyDER(k)
	}
	spiffe, err := url.Parse(ClientSAN)
	if err != nil {
		t.Fatal(err)
	}
	ca, caKey, caDER := newCA("dynalimit test CA")
	rogue, rogueKey, _ := newCA("another CA")
	var p PKI
	p.CA = write("ca.pem", "CERTIFICATE", caDER)
	der, key := issue(ca, caKey, 2, &x509.Certificate{
		Subject: pkix.Name{CommonName: "ratelimit"}, DNSNames: []string{"ratelimit"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	p.ServerCert, p.ServerKey = write("server.pem", "CERTIFICATE", der), write("server-key.pem", "PRIVATE KEY", key)
	der, key = issue(ca, caKey, 3, &x509.Certificate{
		Subject: pkix.Name{CommonName: "envoy"}, URIs: []*url.URL{spiffe},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	p.ClientCert, p.ClientKey = write("envoy.pem", "CERTIFICATE", der), write("envoy-key.pem", "PRIVATE KEY", key)
	der, key = issue(rogue, rogueKey, 4, &x509.Certificate{
		Subject: pkix.Name{CommonName: "envoy"}, URIs: []*url.URL{spiffe},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	p.RogueCert, p.RogueKey = write("rogue.pem", "CERTIFICATE", der), write("rogue-key.pem", "PRIVATE KEY", key)
	return p
}
