package testutil

import (
	"fmt"
	"net"
	"testing"
)

// FreePort returns a TCP port that was free on 127.0.0.1 a moment ago, or
// fails t.
func FreePort(t testing.TB) int {
	t.Helper()
	port, err := FindFreePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// FindFreePort returns a TCP port that was free on 127.0.0.1 a moment ago.
func FindFreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("testutil: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
