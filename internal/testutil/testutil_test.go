package testutil

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain runs the tests, or, in the process TestServerMovesOffATakenPort
// starts (TESTUTIL_HELPER_SERVER=1), the helper server.
func TestMain(m *testing.M) {
	if os.Getenv("TESTUTIL_HELPER_SERVER") == "1" {
		helperServer()
		return
	}
	os.Exit(m.Run())
}

// helperServer binds the three listeners a Server gives it and answers
// /healthcheck; a port it cannot bind ends it with the error.
func helperServer() {
	for _, k := range []string{"GRPC_PORT", "DEBUG_PORT"} {
		if _, err := net.Listen("tcp", "127.0.0.1:"+os.Getenv(k)); err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:"+os.Getenv("PORT"))
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	_ = http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
}

func TestLockedBufferKeepsTheLastBytes(t *testing.T) {
	tests := []struct {
		name   string
		b      *LockedBuffer
		writes []string
		want   string
	}{
		{"unbounded", &LockedBuffer{}, []string{"abc", "def"}, "abcdef"},
		{"within the bound", NewLockedBuffer(6), []string{"abc", "def"}, "abcdef"},
		{"past the bound", NewLockedBuffer(4), []string{"abc", "def"}, "cdef"},
		{"one write past the bound", NewLockedBuffer(2), []string{"abcdef"}, "ef"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, w := range tt.writes {
				if n, err := tt.b.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write(%q) = %d, %v, want %d, nil", w, n, err, len(w))
				}
			}
			if got := tt.b.String(); got != tt.want {
				t.Errorf("String() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestFreePortIsFree(t *testing.T) {
	port := FreePort(t)
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatalf("listen on FreePort() = %d: %v", port, err)
	}
	_ = l.Close()
}

// TestFreePortsDistinctBelowEphemeral: ports are never handed out twice,
// and lie below the ephemeral range, where no outgoing connection's source
// port can take them.
func TestFreePortsDistinctBelowEphemeral(t *testing.T) {
	low := ephemeralLow()
	if low <= portFloor {
		t.Fatalf("ip_local_port_range starts at %d: no room below it; this test expects Linux's default (32768)", low)
	}
	seen := map[int]bool{}
	for range 500 {
		p := FreePort(t)
		if seen[p] {
			t.Fatalf("FreePort() = %d twice", p)
		}
		seen[p] = true
		if p < portFloor || p >= low {
			t.Errorf("FreePort() = %d, want in [%d, %d)", p, portFloor, low)
		}
	}
}

// TestServerMovesOffATakenPort: a port another process took between being
// found free and being bound is given up on the first start; a restart
// keeps the ports.
func TestServerMovesOffATakenPort(t *testing.T) {
	s, err := newServer(ServerOptions{Bin: os.Args[0], Env: []string{"TESTUTIL_HELPER_SERVER=1"}})
	if err != nil {
		t.Fatal(err)
	}
	taken := s.DebugPort
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", taken))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := s.Start(); err != nil {
		t.Fatalf("Start() with its debug port taken = %v", err)
	}
	if s.DebugPort == taken {
		t.Errorf("DebugPort = %d, the port taken", taken)
	}
	ports := [3]int{s.GRPCPort, s.HTTPPort, s.DebugPort}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatalf("Start() again = %v", err)
	}
	defer func() { _ = s.Stop() }()
	if again := [3]int{s.GRPCPort, s.HTTPPort, s.DebugPort}; again != ports {
		t.Errorf("ports after a restart = %v, want %v", again, ports)
	}
}

func TestRepoRootHoldsGoMod(t *testing.T) {
	root := RepoRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil || !strings.HasPrefix(string(b), "module github.com/dynalimit/dynalimit\n") {
		t.Errorf("RepoRoot() = %s: go.mod %q, %v, want the module's", root, b, err)
	}
}

func TestPKIVerifies(t *testing.T) {
	p := NewPKI(t)
	parse := func(file string) *x509.Certificate {
		t.Helper()
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		blk, _ := pem.Decode(b)
		if blk == nil {
			t.Fatalf("%s: no PEM block", file)
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	server := x509.VerifyOptions{Roots: p.CA, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	for _, name := range []string{"127.0.0.1", "localhost", "ratelimit"} {
		opts := server
		opts.DNSName = name
		if _, err := parse(p.ServerCert).Verify(opts); err != nil {
			t.Errorf("server certificate for %s: %v", name, err)
		}
	}
	client := x509.VerifyOptions{Roots: p.CA, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	c := parse(p.ClientCert)
	if _, err := c.Verify(client); err != nil {
		t.Errorf("client certificate: %v", err)
	}
	if len(c.URIs) != 1 || c.URIs[0].String() != ClientSAN {
		t.Errorf("client certificate URIs = %v, want [%s]", c.URIs, ClientSAN)
	}
	if _, err := parse(p.RogueCert).Verify(client); err == nil {
		t.Error("the rogue client certificate verifies against CA, want unknown authority")
	}
	if len(p.Server.Certificate) == 0 || len(p.Client.Certificate) == 0 {
		t.Error("the loaded server or client pair is empty")
	}
}

func TestStartProcessStopsAtCleanup(t *testing.T) {
	var p *Process
	t.Run("run", func(t *testing.T) {
		p = StartProcess(t, "sleep", exec.Command("sh", "-c", "echo started; exec sleep 60"), func() bool { return true })
		if !Eventually(5*time.Second, func() bool { return strings.Contains(p.Output(), "started") }) {
			t.Errorf("Output() = %q, want started", p.Output())
		}
	})
	select {
	case <-p.Exited():
	default:
		t.Fatal("the process still runs after its test's cleanup")
	}
	var exit *exec.ExitError
	if err := p.Err(); !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
		t.Errorf("Err() = %v, want killed by SIGTERM", err)
	}
}

// TestPortReservedAgainstOtherProcesses: a port FindFreePort handed out is
// locked in its file, so that another test binary's reservePort of it
// fails (a lock taken through another open file, as another process
// would), and a port no one holds can be reserved.
func TestPortReservedAgainstOtherProcesses(t *testing.T) {
	port := FreePort(t)
	if f, err := reservePort(port); err == nil {
		_ = f.Close()
		t.Fatalf("reservePort(%d) of a port handed out succeeded, want it refused", port)
	}
	other := FreePort(t)
	ports.Lock()
	lock := ports.given[other]
	delete(ports.given, other)
	ports.Unlock()
	_ = lock.Close() // as if the process holding it had exited
	f, err := reservePort(other)
	if err != nil {
		t.Fatalf("reservePort(%d) after its holder let go: %v", other, err)
	}
	_ = f.Close()
}

// TestProberSummary: a prober's summary counts its probes since a time,
// their failures and quantiles, and the CPU its process used; the report
// of a failed test names every prober added for it.
func TestProberSummary(t *testing.T) {
	p := newProber("probed", func() int { return os.Getpid() }, nil)
	from := time.Now()
	for i := range 100 {
		p.add(probeSample{at: from.Add(time.Duration(i) * time.Millisecond), took: time.Duration(i+1) * time.Millisecond, failed: i%10 == 0, cpu: time.Duration(i) * 10 * time.Millisecond})
	}
	got := p.Summary(from)
	for _, want := range []string{"probed: 100 probes", "p50 50ms", "p99 99ms", "max 100ms", "10 failed", "CPU 1.0 s in 0.1 s (10.00 cores)"} {
		if !strings.Contains(got, want) {
			t.Errorf("Summary = %q, want it to hold %q", got, want)
		}
	}
	if got := p.Summary(from.Add(time.Hour)); got != "probed: no probe" {
		t.Errorf("Summary of a window without probes = %q", got)
	}
	r := &slowReport{from: from, probers: []*Prober{p}}
	if text := r.text(); !strings.Contains(text, "probed: 100 probes") || !strings.Contains(text, "load average") {
		t.Errorf("report = %q, want the prober's summary and the load average", text)
	}
	if cpu := ProcessCPU(os.Getpid()); cpu < 0 {
		t.Errorf("ProcessCPU of this process = %v, want it read", cpu)
	}
	if cpu := ProcessCPU(0); cpu != -1 {
		t.Errorf("ProcessCPU(0) = %v, want -1", cpu)
	}
}
