package testutil

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
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

// portFloor is the lowest port FindFreePort draws from: above the fixed
// ports of the README's walkthroughs (internal/walkthrough: 6070 to
// 10000), which run while other packages' tests draw theirs.
const portFloor = 10001

// ports are the ports this process has handed out, each with the file
// whose lock reserves it against the other test binaries of the machine.
var ports = struct {
	sync.Mutex
	given map[int]*os.File
}{given: make(map[int]*os.File)}

// FindFreePort returns a TCP port that was free on 127.0.0.1 a moment ago
// and that no test binary of the machine has handed out while it runs.
// It draws the port below the kernel's ephemeral range
// (ip_local_port_range), where the source port of an outgoing connection
// cannot take it between the moment it is found and the moment a server
// binds it; when that range cannot be read or leaves no room, it asks the
// kernel for one. A port handed out is reserved by a lock on a file of its
// own under the temporary directory, held until the process exits, so
// that test binaries running at once (go test -p 2) never hand out the
// same port, even where one is slow to bind it (a JVM, Envoy).
func FindFreePort() (int, error) {
	ports.Lock()
	defer ports.Unlock()
	hi := ephemeralLow()
	var last error
	for range 200 {
		port := 0
		if hi > portFloor {
			port = portFloor + rand.IntN(hi-portFloor)
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			last = err
			continue
		}
		port = l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if ports.given[port] != nil {
			continue
		}
		lock, err := reservePort(port)
		if err != nil {
			last = err
			continue
		}
		ports.given[port] = lock
		return port, nil
	}
	if last == nil {
		last = errors.New("every port drawn was handed out before")
	}
	return 0, fmt.Errorf("testutil: find a free port: %w", last)
}

// ephemeralLow is the lowest port of the kernel's ephemeral range, or 0
// when it cannot be read.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0
	}
	low, err := strconv.Atoi(f[0])
	if err != nil {
		return 0
	}
	return low
}

// reservePort locks the file of port under the temporary directory, or
// fails when another process holds it. The lock lasts while the file stays
// open: until the process exits.
func reservePort(port int) (*os.File, error) {
	dir := filepath.Join(os.TempDir(), "dynalimit-test-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("port %d is another test binary's: %w", port, err)
	}
	return f, nil
}
