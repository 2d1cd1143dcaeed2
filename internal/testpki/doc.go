// Package testpki issues a test CA with a server certificate (for
// 127.0.0.1) and a client certificate, as PEM files and loaded pairs, for
// the tests of TLS and mTLS.
package testpki
