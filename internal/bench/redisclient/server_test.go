//go:build redisbench

package redisclient

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// server is a redis-server started for the run, with no persistence, and a
// plain connection of its own for INFO and CONFIG RESETSTAT (neither client
// library in the way).
type server struct {
	cmd  *exec.Cmd
	addr string
	conn net.Conn
	rd   *bufio.Reader
}

// startServer starts redis-server on a free port of the loopback interface
// and waits until it answers.
func startServer() (*server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server is not installed (Debian: apt-get install -y redis-server): %w", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	s := &server{addr: "127.0.0.1:" + strconv.Itoa(port)}
	s.cmd = exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning")
	s.cmd.Stdout, s.cmd.Stderr = os.Stderr, os.Stderr
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if s.conn, err = net.Dial("tcp", s.addr); err == nil {
			s.rd = bufio.NewReader(s.conn)
			if _, err = s.do("PING"); err == nil {
				return s, nil
			}
			_ = s.conn.Close()
		}
	}
	s.stop()
	return nil, fmt.Errorf("redis-server on %s did not answer: %w", s.addr, err)
}

// stop ends redis-server and waits for it.
func (s *server) stop() {
	if s.conn != nil {
		_ = s.conn.Close()
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
}

// do sends one command of plain words and returns its answer: a simple
// string, an integer or a bulk string (all INFO, PING and CONFIG give).
func (s *server) do(words ...string) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(words))
	for _, w := range words {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(w), w)
	}
	_ = s.conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(s.conn, b.String()); err != nil {
		return "", err
	}
	line, err := s.rd.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", fmt.Errorf("redis: %s", line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", fmt.Errorf("redis: bulk %q", line)
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(s.rd, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	return "", fmt.Errorf("redis: unexpected answer %q", line)
}

// info returns INFO's fields as numbers where they are numbers; the
// commandstats lines give cmdstat_<name>.calls.
func (s *server) info() (map[string]float64, error) {
	text, err := s.do("INFO", "everything")
	if err != nil {
		return nil, err
	}
	m := map[string]float64{}
	for _, line := range strings.Split(text, "\r\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(k, "cmdstat_") {
			for _, kv := range strings.Split(v, ",") {
				f, val, _ := strings.Cut(kv, "=")
				if n, err := strconv.ParseFloat(val, 64); err == nil {
					m[k+"."+f] = n
				}
			}
			continue
		}
		if n, err := strconv.ParseFloat(v, 64); err == nil {
			m[k] = n
		}
	}
	return m, nil
}
