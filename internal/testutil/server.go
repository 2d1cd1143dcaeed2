package testutil

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// readyTimeout bounds how long a Server may take to answer /healthcheck.
const readyTimeout = 30 * time.Second

// ServerOptions say how to run a Server.
type ServerOptions struct {
	// Bin is the binary; StartServer defaults it to Binary.
	Bin string
	// Args are its arguments, e.g. serve -config_dir DIR.
	Args []string
	// Env is added to the environment after the listener settings (later
	// entries win).
	Env []string
	// OwnEnv starts from an empty environment instead of the test's, as a
	// container does.
	OwnEnv bool
	// Ready reports whether an answer of /healthcheck with this status
	// code means the server is up; nil accepts 200 only.
	Ready func(code int) bool
	// StopGrace is how long Stop waits after SIGTERM before SIGKILL; 0
	// kills at once.
	StopGrace time.Duration
}

// Server is the ratelimit binary, or a peer that reads the same settings
// (GRPC_HOST/GRPC_PORT, HOST/PORT, DEBUG_HOST/DEBUG_PORT), serving on
// loopback ports of its own.
type Server struct {
	// GRPCPort, HTTPPort and DebugPort are its listeners on 127.0.0.1.
	GRPCPort, HTTPPort, DebugPort int

	o       ServerOptions
	mu      sync.Mutex
	proc    *Process
	started bool            // it has been ready once: its ports are its own
	logs    strings.Builder // output of the processes stopped so far
}

// StartServer runs o.Bin (default: the ratelimit binary, built once) on
// free loopback ports and waits until /healthcheck answers as o.Ready
// wants. The cleanup stops it and logs its output when t failed.
func StartServer(t testing.TB, o ServerOptions) *Server {
	t.Helper()
	if o.Bin == "" {
		o.Bin = Binary(t)
	}
	s, err := newServer(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", o.Bin, s.Output())
		}
	})
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	probe := StartProber(fmt.Sprintf("%s :%d (GET /healthcheck)", filepath.Base(o.Bin), s.GRPCPort), s.Pid, HTTPProbe("http://"+s.HTTPAddr()+"/healthcheck"))
	t.Cleanup(probe.Stop)
	ReportSlowOnFailure(t, probe)
	return s
}

// NewServer is StartServer for code outside a test: o.Bin is required, and
// stopping the server is the caller's.
func NewServer(o ServerOptions) (*Server, error) {
	if o.Bin == "" {
		return nil, errors.New("testutil: ServerOptions.Bin is empty")
	}
	s, err := newServer(o)
	if err != nil {
		return nil, err
	}
	if err := s.Start(); err != nil {
		return nil, err
	}
	return s, nil
}

func newServer(o ServerOptions) (*Server, error) {
	s := &Server{o: o}
	if err := s.pickPorts(); err != nil {
		return nil, err
	}
	return s, nil
}

// pickPorts gives the server three free ports.
func (s *Server) pickPorts() error {
	for _, p := range []*int{&s.GRPCPort, &s.HTTPPort, &s.DebugPort} {
		var err error
		if *p, err = FindFreePort(); err != nil {
			return err
		}
	}
	return nil
}

// Start starts the binary, again after Stop, on the same ports, and waits
// until it is ready. On the first start a port found taken (another
// process bound it since it was found free) is given up for three new
// ones; after a Stop the same ports are tried again, since a port of the
// previous process may linger for a moment.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		return fmt.Errorf("testutil: %s is already running", s.o.Bin)
	}
	var err error
	for range 50 {
		cmd := exec.Command(s.o.Bin, s.o.Args...)
		cmd.Env = s.env()
		p, lerr := Launch(s.o.Bin, cmd)
		if lerr != nil {
			return lerr
		}
		if err = s.waitReady(p); err == nil {
			s.proc, s.started = p, true
			return nil
		}
		_ = p.Stop(syscall.SIGKILL, 0)
		s.logs.WriteString(p.Output())
		if !strings.Contains(p.Output(), "address already in use") {
			break
		}
		if !s.started {
			if perr := s.pickPorts(); perr != nil {
				return perr
			}
			continue
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("testutil: %s: %w\n%s", s.o.Bin, err, s.logs.String())
}

// env is the environment of the server's process.
func (s *Server) env() []string {
	var env []string
	if !s.o.OwnEnv {
		env = os.Environ()
	}
	env = append(env,
		"GRPC_HOST=127.0.0.1", "GRPC_PORT="+strconv.Itoa(s.GRPCPort),
		"HOST=127.0.0.1", "PORT="+strconv.Itoa(s.HTTPPort),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+strconv.Itoa(s.DebugPort))
	return append(env, s.o.Env...)
}

func (s *Server) waitReady(p *Process) error {
	client := &http.Client{Timeout: time.Second}
	defer client.CloseIdleConnections()
	ready := s.o.Ready
	if ready == nil {
		ready = func(code int) bool { return code == http.StatusOK }
	}
	deadline := time.Now().Add(readyTimeout)
	for time.Now().Before(deadline) {
		if !p.Running() {
			return p.ExitError()
		}
		resp, err := client.Get("http://" + s.HTTPAddr() + "/healthcheck")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if ready(resp.StatusCode) {
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("not ready within %v", readyTimeout)
}

// Stop stops the binary (SIGTERM, then SIGKILL after StopGrace) and waits
// for it. Stopping a stopped server does nothing.
func (s *Server) Stop() error { return s.stop(s.o.StopGrace) }

// Kill kills the binary (SIGKILL: it gets no shutdown of its own) and
// waits for it. Killing a stopped server does nothing.
func (s *Server) Kill() error { return s.stop(0) }

// stop sends SIGTERM, then SIGKILL after grace (at once for 0), and waits.
func (s *Server) stop(grace time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return nil
	}
	err := s.proc.Stop(syscall.SIGTERM, grace)
	s.logs.WriteString(s.proc.Output())
	s.proc = nil
	return err
}

// Process returns the running process, or nil after Stop.
func (s *Server) Process() *Process {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc
}

// Pid returns the running process's id, or 0.
func (s *Server) Pid() int {
	if p := s.Process(); p != nil {
		return p.Pid()
	}
	return 0
}

// Output returns what the binary printed so far, over every start.
func (s *Server) Output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.logs.String()
	if s.proc != nil {
		out += s.proc.Output()
	}
	return out
}

// GRPCAddr returns host:port of the gRPC listener.
func (s *Server) GRPCAddr() string { return "127.0.0.1:" + strconv.Itoa(s.GRPCPort) }

// HTTPAddr returns host:port of the HTTP listener (/healthcheck, /json).
func (s *Server) HTTPAddr() string { return "127.0.0.1:" + strconv.Itoa(s.HTTPPort) }

// DebugAddr returns host:port of the debug listener (/metrics).
func (s *Server) DebugAddr() string { return "127.0.0.1:" + strconv.Itoa(s.DebugPort) }
