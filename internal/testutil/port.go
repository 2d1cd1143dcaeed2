package testutil

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
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

// portFloor is the lowest port FindFreePort draws from.
const portFloor = 10000

// ports are the ports this process has handed out.
var ports = struct {
	sync.Mutex
	given map[int]bool
}{given: make(map[int]bool)}

// FindFreePort returns a TCP port that was free on 127.0.0.1 a moment ago
// and that this process has not handed out before. It draws the port
// below the kernel's ephemeral range (ip_local_port_range), where the
// source port of an outgoing connection cannot take it between the
// moment it is found and the moment a server binds it; when that range
// cannot be read or leaves no room, it asks the kernel for one.
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
		if !ports.given[port] {
			ports.given[port] = true
			return port, nil
		}
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
