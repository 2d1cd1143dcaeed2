package redistest

import (
	"crypto/tls"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/internal/testutil"
)

// startTimeout bounds how long a server may take to answer PING.
const startTimeout = 20 * time.Second

// Options configure a server. The zero value is a plain Redis without a
// password.
type Options struct {
	// Flavor is the server to run: Redis (the default) or Valkey.
	Flavor Flavor
	// Password, when set, is required: of the default user (requirepass),
	// or of User when that is set.
	Password string
	// User, with Password, is an ACL user with every right (~* &* +@all);
	// the default user is then off.
	User string
	// TLS serves TLS only, on the server's port, requiring a client
	// certificate of the PKI's CA (tls-auth-clients yes).
	TLS bool
	// PKI issues the certificates when TLS is set; nil: a new one of the
	// test's (testutil.NewPKI). Its server certificate names 127.0.0.1.
	PKI *testutil.PKI
	// Args are more configuration, as the server's command line takes it
	// ("--maxmemory", "10mb").
	Args []string
}

// Server is one redis-server (or valkey-server) of a test, on a port of
// its own on 127.0.0.1, without persistence, in a temporary directory.
// It is stopped when the test ends, and its output is logged then if the
// test failed. Stop and Start again keep its port and directory. A Server
// is safe for concurrent use, but Stop, Start, Kill, Freeze and Thaw must
// not race with each other.
type Server struct {
	t    testing.TB
	bins Binaries
	opts Options
	port int
	dir  string
	args []string

	mu     sync.Mutex
	proc   *testutil.Process
	old    []string // output of the runs before proc
	frozen bool
}

// Start starts a server for t and waits until it answers PING, or fails
// t with the reason (a server that cannot be found nor fetched fails t;
// it never skips).
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	s := newServer(t, opts, nil)
	s.Start()
	return s
}

// newServer prepares a server with the given extra arguments (a
// cluster's), without starting it.
func newServer(t testing.TB, opts Options, extra []string) *Server {
	t.Helper()
	bins, err := FindBinaries(opts.Flavor)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	if opts.TLS && opts.PKI == nil {
		p := testutil.NewPKI(t)
		opts.PKI = &p
	}
	s := &Server{t: t, bins: bins, opts: opts, port: testutil.FreePort(t), dir: t.TempDir()}
	s.args = append(s.baseArgs(), extra...)
	s.args = append(s.args, opts.Args...)
	t.Cleanup(s.cleanup)
	return s
}

// baseArgs are the command line of every server: loopback, no
// persistence, the log on standard output, auth and TLS as asked.
func (s *Server) baseArgs() []string {
	port := strconv.Itoa(s.port)
	args := []string{"--bind", "127.0.0.1", "--port", port, "--dir", s.dir, "--save", "", "--appendonly", "no",
		"--daemonize", "no", "--logfile", "", "--loglevel", "notice",
		// A replica syncs at once, and a master stops at once.
		"--repl-diskless-sync-delay", "0", "--shutdown-timeout", "0"}
	o := s.opts
	switch {
	case o.User != "" && o.Password != "":
		args = append(args, "--user", o.User, "on", ">"+o.Password, "~*", "&*", "+@all", "--user", "default", "off",
			"--masteruser", o.User, "--masterauth", o.Password)
	case o.Password != "":
		args = append(args, "--requirepass", o.Password, "--masterauth", o.Password)
	}
	if o.TLS {
		p := o.PKI
		args = append(args, "--port", "0", "--tls-port", port,
			"--tls-cert-file", p.ServerCert, "--tls-key-file", p.ServerKey,
			"--tls-client-cert-file", p.ClientCert, "--tls-client-key-file", p.ClientKey,
			"--tls-ca-cert-file", p.CAFile, "--tls-auth-clients", "yes", "--tls-replication", "yes")
	}
	return args
}

// Start starts the server again after Stop or Kill, on the same port and
// in the same directory, and waits until it answers PING; it fails the
// test when it cannot. Starting a running server does nothing.
func (s *Server) Start() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil && s.proc.Running() {
		return
	}
	if s.proc != nil {
		s.old = append(s.old, s.proc.Output())
	}
	name := fmt.Sprintf("%s-server %s", s.bins.Flavor, s.Addr())
	p, err := testutil.Launch(name, s.bins.Command(s.bins.Server, s.args...))
	if err != nil {
		s.t.Fatal(err)
	}
	s.proc, s.frozen = p, false
	up := testutil.Eventually(startTimeout, func() bool {
		if !p.Running() {
			return true
		}
		v, err := s.Do("PING")
		return err == nil && v == "PONG"
	})
	if !p.Running() {
		s.t.Fatalf("redistest: %s %v: %v\n%s", name, s.args, p.ExitError(), p.Output())
	}
	if !up {
		s.t.Fatalf("redistest: %s: no PONG within %v\n%s", name, startTimeout, p.Output())
	}
}

// Stop stops the server (SIGTERM, SIGKILL after 5 s) and waits until it
// has exited; Start starts it again. Its data is lost: nothing persists.
func (s *Server) Stop() { s.halt(syscall.SIGTERM, 5*time.Second) }

// Kill kills the server (SIGKILL), as a crash, and waits until it has
// exited.
func (s *Server) Kill() { s.halt(syscall.SIGKILL, 0) }

func (s *Server) halt(sig syscall.Signal, grace time.Duration) {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return
	}
	if s.frozen {
		_ = s.proc.Signal(syscall.SIGCONT)
		s.frozen = false
	}
	if err := s.proc.Stop(sig, grace); err != nil {
		s.t.Error(err)
	}
}

// Freeze stops the process with SIGSTOP: it keeps its connections but
// answers nothing until Thaw.
func (s *Server) Freeze() { s.signal(syscall.SIGSTOP, true) }

// Thaw resumes a frozen server with SIGCONT.
func (s *Server) Thaw() { s.signal(syscall.SIGCONT, false) }

func (s *Server) signal(sig syscall.Signal, frozen bool) {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil || !s.proc.Running() {
		s.t.Fatalf("redistest: %s is not running", s.Addr())
	}
	if err := s.proc.Signal(sig); err != nil {
		s.t.Fatalf("redistest: signal %s: %v", s.Addr(), err)
	}
	s.frozen = frozen
}

// cleanup kills the server and logs its output when the test failed.
func (s *Server) cleanup() {
	s.halt(syscall.SIGKILL, 0)
	if s.t.Failed() {
		s.t.Logf("%s-server %s output:\n%s", s.bins.Flavor, s.Addr(), s.Output())
	}
}

// Addr returns the server's address, 127.0.0.1:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// Port returns the server's port (its TLS port under Options.TLS).
func (s *Server) Port() int { return s.port }

// Dir returns the server's working directory.
func (s *Server) Dir() string { return s.dir }

// Binaries returns the binaries the server runs.
func (s *Server) Binaries() Binaries { return s.bins }

// Options returns the server's options (with the PKI made for TLS).
func (s *Server) Options() Options { return s.opts }

// Pid returns the process id of the server's current run (0 before the
// first), for its RSS in /proc.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.Pid()
}

// Running reports whether the server's process runs (frozen or not).
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil && s.proc.Running()
}

// Output returns what the server printed, over all its runs.
func (s *Server) Output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := strings.Join(s.old, "\n--- restarted ---\n")
	if s.proc != nil {
		if out != "" {
			out += "\n--- restarted ---\n"
		}
		out += s.proc.Output()
	}
	return out
}

// ClientTLS returns a client's TLS configuration for the server (its CA,
// the PKI's client certificate), or nil without TLS.
func (s *Server) ClientTLS() *tls.Config {
	if !s.opts.TLS {
		return nil
	}
	return &tls.Config{RootCAs: s.opts.PKI.CA, Certificates: []tls.Certificate{s.opts.PKI.Client}, MinVersion: tls.VersionTLS12}
}

// DialConfig returns how to reach the server with its credentials.
func (s *Server) DialConfig() DialConfig {
	return DialConfig{Addr: s.Addr(), TLS: s.ClientTLS(), User: s.opts.User, Password: s.opts.Password}
}

// Dial opens a connection to the server, authenticated.
func (s *Server) Dial() (*Conn, error) { return Dial(s.DialConfig()) }

// Do runs one command on a connection of its own (see Conn.Do); each
// call bounds its dial and its reply by 5 s.
func (s *Server) Do(args ...string) (any, error) {
	c, err := s.Dial()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.Do(args...)
}

// MustDo runs one command and returns its reply, or fails the test.
func (s *Server) MustDo(args ...string) any {
	s.t.Helper()
	v, err := s.Do(args...)
	if err != nil {
		s.t.Fatalf("redistest: %s %v: %v", s.Addr(), args, err)
	}
	return v
}

// Info returns the fields of INFO section (key: value), or fails the test.
func (s *Server) Info(section string) map[string]string {
	s.t.Helper()
	v, _ := s.MustDo("INFO", section).(string)
	return parseInfo(v)
}

// CommandStats returns the calls of each command (lower case, "evalsha",
// "fcall") since the server started or since CONFIG RESETSTAT, from
// INFO commandstats, or fails the test.
func (s *Server) CommandStats() map[string]int64 {
	s.t.Helper()
	stats := make(map[string]int64)
	for k, v := range s.Info("commandstats") {
		name, ok := strings.CutPrefix(k, "cmdstat_")
		if !ok {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(v, "calls="), ",")
		n, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			s.t.Fatalf("redistest: INFO commandstats %s:%s: %v", k, v, err)
		}
		stats[name] = n
	}
	return stats
}

// CLIArgs returns the arguments that point redis-cli (valkey-cli) at the
// server, with its TLS files and user; the password goes in CLIEnv.
func (s *Server) CLIArgs() []string {
	args := []string{"-h", "127.0.0.1", "-p", strconv.Itoa(s.port)}
	if s.opts.TLS {
		p := s.opts.PKI
		args = append(args, "--tls", "--cacert", p.CAFile, "--cert", p.ClientCert, "--key", p.ClientKey)
	}
	if s.opts.User != "" {
		args = append(args, "--user", s.opts.User)
	}
	return args
}

// CLI runs the command-line client on the server with args (a command,
// or options such as --cluster) and returns its output, or fails the
// test. The client prints error replies and exits 0: prefer Do for
// commands whose errors matter.
func (s *Server) CLI(args ...string) string {
	s.t.Helper()
	cmd := s.bins.Command(s.bins.CLI, append(s.CLIArgs(), args...)...)
	if s.opts.Password != "" {
		cmd.Env = append(cmd.Env, "REDISCLI_AUTH="+s.opts.Password, "VALKEYCLI_AUTH="+s.opts.Password)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		s.t.Fatalf("redistest: %s %s: %v\n%s", filepath.Base(s.bins.CLI), strings.Join(args, " "), err, out)
	}
	return string(out)
}
