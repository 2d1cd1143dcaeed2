package redisclient

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// Check reports what is wrong with the files' settings without reading
// the files: a client certificate without its key, or the reverse.
func (f TLSFiles) Check() error {
	if (f.ClientCert == "") != (f.ClientKey == "") {
		return errors.New("REDIS_TLS_CLIENT_CERT and REDIS_TLS_CLIENT_KEY go together: set both or neither")
	}
	return nil
}

// Config reads the files into the client's TLS configuration: TLS 1.2 or
// later; the system's roots plus REDIS_TLS_CACERT; the client certificate,
// when set. With SkipHostnameVerification the server's chain is still
// verified against those roots (VerifyConnection), only not its name; the
// name is otherwise the address dialled (each node's, on a cluster or
// behind sentinels). Its errors name the setting at fault.
func (f TLSFiles) Config() (*tls.Config, error) {
	if err := f.Check(); err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.ClientCert != "" {
		pair, err := tls.LoadX509KeyPair(f.ClientCert, f.ClientKey)
		if err != nil {
			return nil, fmt.Errorf("REDIS_TLS_CLIENT_CERT=%q, REDIS_TLS_CLIENT_KEY=%q: %w", f.ClientCert, f.ClientKey, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	if f.CACert != "" {
		pem, err := os.ReadFile(f.CACert)
		if err != nil {
			return nil, fmt.Errorf("REDIS_TLS_CACERT=%q: %w", f.CACert, err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil || pool == nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("REDIS_TLS_CACERT=%q: no PEM certificate in it", f.CACert)
		}
		cfg.RootCAs = pool
	}
	if f.SkipHostnameVerification {
		cfg.InsecureSkipVerify = true // the chain is verified below, only not the name
		cfg.VerifyConnection = verifyChain(cfg.RootCAs)
	}
	return cfg, nil
}

// verifyChain verifies the server's chain against roots (nil: the
// system's) for server authentication, whatever name it carries.
func verifyChain(roots *x509.CertPool) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("redis: the server sent no certificate")
		}
		inter := x509.NewCertPool()
		for _, c := range cs.PeerCertificates[1:] {
			inter.AddCert(c)
		}
		_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{
			Roots:         roots,
			Intermediates: inter,
			KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		})
		if err != nil {
			return fmt.Errorf("redis: server certificate: %w", err)
		}
		return nil
	}
}
