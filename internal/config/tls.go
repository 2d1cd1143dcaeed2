package config

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
)

// DefaultCertCheckInterval is how often a CertWatcher started by ServerTLS
// rereads its files.
const DefaultCertCheckInterval = 10 * time.Second

// CertWatcherOptions configure a CertWatcher. CertFile and KeyFile are
// required.
type CertWatcherOptions struct {
	CertFile     string // PEM certificate chain
	KeyFile      string // PEM private key
	ClientCAFile string // PEM client CA bundle; when set, clients must present a certificate it verifies
	ClientSAN    string // when set (with ClientCAFile), a SAN every client certificate must carry
	// Interval between checks in Run; zero means DefaultCertCheckInterval.
	Interval time.Duration
	// Logger receives one entry per change; nil means the standard logger.
	Logger *logrus.Entry
}

// CertWatcher serves the newest valid certificate, key and client CA read
// from files. Run rereads the files on a ticker; a change that does not
// parse (or a key that does not match its certificate, as happens between
// the writes of a rotation) is logged once and the previous material keeps
// serving. Content, not modification time, is compared, so Kubernetes
// Secret symlink swaps are seen.
//
// The TLS configs it hands out are immutable snapshots; all methods are
// safe for concurrent use.
type CertWatcher struct {
	opts     CertWatcherOptions
	log      *logrus.Entry
	snap     atomic.Pointer[certSnapshot]
	mu       sync.Mutex // serialises checks; guards the fields below
	lastGood [3][]byte  // file contents of the serving snapshot
	lastBad  [3][]byte  // the last contents that failed, to log each failure once
	haveBad  bool
}

// certSnapshot is one consistent set of serving material.
type certSnapshot struct {
	cert   *tls.Certificate
	config *tls.Config // per-connection config built from cert and the CA pool
}

// ServerTLS returns the gRPC server's TLS configuration and the watcher
// that keeps it current, per GRPC_SERVER_USE_TLS and the GRPC_SERVER_TLS_*
// and GRPC_CLIENT_TLS_* settings. It returns nil, nil, nil when TLS is off.
// The caller runs the watcher's Run for reloads to happen.
//
// With GRPC_CLIENT_TLS_CACERT set, client certificates are required and
// verified against that bundle (ClientAuth = RequireAndVerifyClientCert);
// with GRPC_CLIENT_TLS_SAN also set, the client's certificate must carry that
// SAN.
func ServerTLS(s Settings, logger *logrus.Entry) (*tls.Config, *CertWatcher, error) {
	if !s.GRPCServerUseTLS {
		return nil, nil, nil
	}
	w, err := NewCertWatcher(CertWatcherOptions{
		CertFile:     s.GRPCServerTLSCert,
		KeyFile:      s.GRPCServerTLSKey,
		ClientCAFile: s.GRPCClientTLSCACert,
		ClientSAN:    s.GRPCClientTLSSAN,
		Logger:       logger,
	})
	if err != nil {
		return nil, nil, err
	}
	return w.TLSConfig(), w, nil
}

// NewCertWatcher reads the files once; unreadable or invalid material is an
// error.
func NewCertWatcher(o CertWatcherOptions) (*CertWatcher, error) {
	if o.CertFile == "" || o.KeyFile == "" {
		return nil, errors.New("config: tls: certificate and key files are required")
	}
	if o.ClientSAN != "" && o.ClientCAFile == "" {
		return nil, errors.New("config: tls: a client SAN needs a client CA file")
	}
	if o.Interval < 0 {
		return nil, fmt.Errorf("config: tls: interval %s is negative", o.Interval)
	}
	if o.Interval == 0 {
		o.Interval = DefaultCertCheckInterval
	}
	w := &CertWatcher{opts: o, log: o.Logger}
	if w.log == nil {
		w.log = logrus.NewEntry(logrus.StandardLogger()).WithField("component", "tls")
	}
	if _, err := w.check(); err != nil {
		return nil, err
	}
	return w, nil
}

// TLSConfig returns a server config that serves the watcher's newest
// material on every handshake through GetConfigForClient (and
// GetCertificate, for callers that bypass it). Its ClientAuth reflects the
// mTLS setting for inspection; the per-connection config decides.
func (w *CertWatcher) TLSConfig() *tls.Config {
	base := w.snap.Load().config
	return &tls.Config{
		MinVersion:         tls.VersionTLS12,
		NextProtos:         []string{"h2"},
		ClientAuth:         base.ClientAuth,
		GetCertificate:     w.GetCertificate,
		GetConfigForClient: w.GetConfigForClient,
	}
}

// GetCertificate returns the newest valid certificate.
func (w *CertWatcher) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return w.snap.Load().cert, nil
}

// GetConfigForClient returns the newest per-connection config: certificate,
// client CA pool and client verification. Callers must not modify it.
func (w *CertWatcher) GetConfigForClient(*tls.ClientHelloInfo) (*tls.Config, error) {
	return w.snap.Load().config, nil
}

// Check rereads the files now and, if they changed and are valid, serves
// them. It returns an error when they changed and are invalid (the
// previous material keeps serving); unchanged files are not an error.
func (w *CertWatcher) Check() error {
	_, err := w.check()
	return err
}

// Run rereads the files every Interval until ctx ends, then returns nil.
// Failures are logged once per distinct bad content.
func (w *CertWatcher) Run(ctx context.Context) error {
	t := time.NewTicker(w.opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			w.checkAndLog()
		}
	}
}

func (w *CertWatcher) checkAndLog() {
	changed, err := w.check()
	fields := logrus.Fields{"cert_file": w.opts.CertFile, "key_file": w.opts.KeyFile, "client_ca_file": w.opts.ClientCAFile}
	switch {
	case err != nil && changed:
		w.log.WithFields(fields).WithError(err).Error("tls material update rejected; keeping the previous certificate")
	case err == nil && changed:
		leaf := w.snap.Load().cert.Leaf
		if leaf != nil {
			fields["serial"] = leaf.SerialNumber.String()
			fields["not_after"] = leaf.NotAfter.UTC().Format(time.RFC3339)
		}
		w.log.WithFields(fields).Info("tls material reloaded")
	}
}

// check reads the files and installs them if they differ from the serving
// material and are valid. changed reports whether the contents differ from
// both the serving material and the last rejected contents, i.e. whether
// the result is news worth logging.
func (w *CertWatcher) check() (changed bool, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var files [3][]byte
	for i, name := range []string{w.opts.CertFile, w.opts.KeyFile, w.opts.ClientCAFile} {
		if name == "" {
			continue
		}
		b, err := os.ReadFile(name)
		if err != nil {
			return w.rejected(files, fmt.Errorf("config: tls: read %s: %w", name, err))
		}
		files[i] = b
	}
	if w.snap.Load() != nil && sameFiles(files, w.lastGood) {
		return false, nil
	}
	snap, err := w.build(files)
	if err != nil {
		return w.rejected(files, err)
	}
	w.snap.Store(snap)
	w.lastGood, w.lastBad, w.haveBad = files, [3][]byte{}, false
	return true, nil
}

// rejected records files as the last bad contents and says whether they
// are new.
func (w *CertWatcher) rejected(files [3][]byte, err error) (bool, error) {
	news := !w.haveBad || !sameFiles(files, w.lastBad)
	w.lastBad, w.haveBad = files, true
	return news, err
}

func sameFiles(a, b [3][]byte) bool {
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

// build parses the key pair and the CA bundle into a serving snapshot.
func (w *CertWatcher) build(files [3][]byte) (*certSnapshot, error) {
	cert, err := tls.X509KeyPair(files[0], files[1])
	if err != nil {
		return nil, fmt.Errorf("config: tls: key pair %s, %s: %w", w.opts.CertFile, w.opts.KeyFile, err)
	}
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"h2"},
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.NoClientCert,
	}
	if w.opts.ClientCAFile != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(files[2]) {
			return nil, fmt.Errorf("config: tls: client CA %s: no PEM certificates", w.opts.ClientCAFile)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
		if san := w.opts.ClientSAN; san != "" {
			cfg.VerifyConnection = func(cs tls.ConnectionState) error {
				if len(cs.PeerCertificates) == 0 {
					return errors.New("config: tls: no client certificate")
				}
				if !hasSAN(cs.PeerCertificates[0], san) {
					return fmt.Errorf("config: tls: client certificate lacks SAN %q", san)
				}
				return nil
			}
		}
	}
	return &certSnapshot{cert: &cert, config: cfg}, nil
}

// hasSAN reports whether c carries san as a DNS name, URI, IP address or
// email address.
func hasSAN(c *x509.Certificate, san string) bool {
	if slices.Contains(c.DNSNames, san) || slices.Contains(c.EmailAddresses, san) {
		return true
	}
	for _, u := range c.URIs {
		if u.String() == san {
			return true
		}
	}
	for _, ip := range c.IPAddresses {
		if ip.String() == san {
			return true
		}
	}
	return false
}
