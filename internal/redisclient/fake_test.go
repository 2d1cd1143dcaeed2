package redisclient

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// fakeRedis speaks just enough RESP3 for rueidis to open a single client:
// HELLO, CLIENT, SELECT and PING. It records every command and can drop
// every connection. It is no Redis: the store's tests run a real one.
type fakeRedis struct {
	ln    net.Listener
	mu    sync.Mutex
	cmds  [][]string
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

// startFake serves on a loopback TCP port, or on the unix socket path when
// not empty, over TLS with cert when not nil.
func startFake(t *testing.T, unixPath string, cert *tls.Certificate) *fakeRedis {
	t.Helper()
	network, addr := "tcp", "127.0.0.1:0"
	if unixPath != "" {
		network, addr = "unix", unixPath
	}
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	if cert != nil {
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{*cert}})
	}
	f := &fakeRedis{ln: ln, conns: map[net.Conn]bool{}}
	f.wg.Add(1)
	go f.accept()
	t.Cleanup(func() {
		_ = ln.Close()
		f.dropAll()
		f.wg.Wait()
	})
	return f
}

func (f *fakeRedis) addr() string { return f.ln.Addr().String() }

func (f *fakeRedis) accept() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.mu.Lock()
		f.conns[c] = true
		f.mu.Unlock()
		f.wg.Add(1)
		go f.serve(c)
	}
}

// dropAll closes every connection the fake holds.
func (f *fakeRedis) dropAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for c := range f.conns {
		_ = c.Close()
	}
}

// commands returns the commands received, each joined by spaces.
func (f *fakeRedis) commands() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]string, len(f.cmds))
	for i, c := range f.cmds {
		out[i] = strings.Join(c, " ")
	}
	return out
}

func (f *fakeRedis) serve(c net.Conn) {
	defer f.wg.Done()
	defer func() {
		f.mu.Lock()
		delete(f.conns, c)
		f.mu.Unlock()
		_ = c.Close()
	}()
	r, w := bufio.NewReader(c), bufio.NewWriter(c)
	for {
		cmd, err := readCommand(r)
		if err != nil {
			return
		}
		f.mu.Lock()
		f.cmds = append(f.cmds, cmd)
		f.mu.Unlock()
		switch strings.ToUpper(cmd[0]) {
		case "HELLO":
			_, _ = w.WriteString("%7\r\n+server\r\n+redis\r\n+version\r\n+7.2.0\r\n+proto\r\n:3\r\n+id\r\n:1\r\n+mode\r\n+standalone\r\n+role\r\n+master\r\n+modules\r\n*0\r\n")
		case "PING":
			_, _ = w.WriteString("+PONG\r\n")
		case "CLIENT", "SELECT":
			_, _ = w.WriteString("+OK\r\n")
		default:
			_, _ = fmt.Fprintf(w, "-ERR unknown command '%s'\r\n", cmd[0])
		}
		if r.Buffered() == 0 {
			if w.Flush() != nil {
				return
			}
		}
	}
}

// readCommand reads one RESP array of bulk strings.
func readCommand(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(line, "*") {
		return nil, fmt.Errorf("not an array: %q", line)
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil || n < 1 {
		return nil, fmt.Errorf("bad array length %q", line)
	}
	cmd := make([]string, n)
	for i := range cmd {
		if line, err = r.ReadString('\n'); err != nil {
			return nil, err
		}
		size, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "$")))
		if err != nil || size < 0 {
			return nil, fmt.Errorf("bad bulk length %q", line)
		}
		b := make([]byte, size+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		cmd[i] = string(b[:size])
	}
	return cmd, nil
}
