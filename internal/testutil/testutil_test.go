package testutil

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

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
