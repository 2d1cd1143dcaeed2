package testutil

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// ClientSAN is the URI SAN of the client certificates NewPKI issues (the
// identity of the Envoy that calls the service).
const ClientSAN = "spiffe://dynalimit.test/envoy"

// PKI is a test CA with a server certificate and a client certificate, and
// a client certificate with the same identity from another CA, written as
// PEM files and loaded.
type PKI struct {
	// Authority issued Server and Client; CA verifies them and CAFile is
	// its certificate as a PEM file.
	Authority *Authority
	CA        *x509.CertPool
	CAFile    string
	// ServerCert and ServerKey are the server certificate's PEM files (DNS
	// ratelimit and localhost, IP 127.0.0.1), Server the pair loaded.
	ServerCert, ServerKey string
	Server                tls.Certificate
	// ClientCert and ClientKey are the client certificate's PEM files (URI
	// ClientSAN), Client the pair loaded.
	ClientCert, ClientKey string
	Client                tls.Certificate
	// RogueCert and RogueKey are a client certificate with Client's
	// identity issued by another CA: a server trusting CA must refuse it.
	RogueCert, RogueKey string
}

// NewPKI issues a PKI into a temporary directory of t.
func NewPKI(t testing.TB) PKI {
	t.Helper()
	dir := t.TempDir()
	ca := NewAuthority(t, "dynalimit test CA")
	p := PKI{Authority: ca, CA: ca.Pool(), CAFile: writePEM(t, dir, "ca.pem", ca.PEM)}
	server := ca.IssueServer(t)
	p.ServerCert, p.ServerKey = server.Write(t, dir, "server")
	p.Server = server.TLS
	client := ca.IssueClient(t, nil, ClientSAN)
	p.ClientCert, p.ClientKey = client.Write(t, dir, "client")
	p.Client = client.TLS
	rogue := NewAuthority(t, "another CA").IssueClient(t, nil, ClientSAN)
	p.RogueCert, p.RogueKey = rogue.Write(t, dir, "rogue")
	return p
}

// Authority is a test certificate authority (ECDSA P-256, valid from an
// hour ago for a day).
type Authority struct {
	// Cert is the authority's certificate; PEM is it PEM-encoded.
	Cert *x509.Certificate
	PEM  []byte

	key    *ecdsa.PrivateKey
	serial atomic.Int64
}

// NewAuthority makes a CA called name.
func NewAuthority(t testing.TB, name string) *Authority {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	a := &Authority{Cert: cert, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), key: key}
	a.serial.Store(1)
	return a
}

// Pool returns a pool holding the authority's certificate.
func (a *Authority) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(a.Cert)
	return p
}

// Leaf is a certificate an Authority issued, with its key.
type Leaf struct {
	// CertPEM and KeyPEM are the certificate and its PKCS#8 key as PEM,
	// TLS the pair loaded.
	CertPEM, KeyPEM []byte
	TLS             tls.Certificate
}

// IssueServer issues a server certificate for ratelimit, localhost and
// 127.0.0.1.
func (a *Authority) IssueServer(t testing.TB) Leaf {
	t.Helper()
	return a.Issue(t, &x509.Certificate{
		Subject: pkix.Name{CommonName: "ratelimit"}, DNSNames: []string{"ratelimit", "localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
}

// IssueClient issues a client certificate with the given DNS and URI SANs.
func (a *Authority) IssueClient(t testing.TB, dns []string, uris ...string) Leaf {
	t.Helper()
	tmpl := &x509.Certificate{
		Subject: pkix.Name{CommonName: "envoy"}, DNSNames: dns,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	for _, u := range uris {
		pu, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, pu)
	}
	return a.Issue(t, tmpl)
}

// Issue signs a certificate for a new key: tmpl gives the subject, the
// SANs and the extended key usage; Issue sets the serial number, the
// validity and the key usage.
func (a *Authority) Issue(t testing.TB, tmpl *x509.Certificate) Leaf {
	t.Helper()
	key := newKey(t)
	tmpl.SerialNumber = big.NewInt(a.serial.Add(1))
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.Cert, &key.PublicKey, a.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	l := Leaf{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}
	if l.TLS, err = tls.X509KeyPair(l.CertPEM, l.KeyPEM); err != nil {
		t.Fatal(err)
	}
	return l
}

// Write writes the certificate and key into dir as name.pem and
// name-key.pem and returns their paths.
func (l Leaf) Write(t testing.TB, dir, name string) (cert, key string) {
	t.Helper()
	return writePEM(t, dir, name+".pem", l.CertPEM), writePEM(t, dir, name+"-key.pem", l.KeyPEM)
}

func writePEM(t testing.TB, dir, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
