package redistest

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// ReplyError is an error reply of the server (ERR, MOVED, WRONGPASS...).
type ReplyError string

// Error returns the reply as the server sent it.
func (e ReplyError) Error() string { return string(e) }

// Conn is a connection speaking RESP2, for the harness's own commands:
// not a client library. Each call has the connection's timeout.
type Conn struct {
	c       net.Conn
	r       *bufio.Reader
	timeout time.Duration
}

// DialConfig says how to reach a server: its address, TLS (nil: plain)
// and the credentials to AUTH with (none when Password is empty).
type DialConfig struct {
	Addr           string
	TLS            *tls.Config
	User, Password string
	// Timeout bounds the dial and each command (default 5 s).
	Timeout time.Duration
}

// Dial connects and authenticates.
func Dial(cfg DialConfig) (*Conn, error) {
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	d := &net.Dialer{Timeout: cfg.Timeout}
	var c net.Conn
	var err error
	if cfg.TLS != nil {
		c, err = tls.DialWithDialer(d, "tcp", cfg.Addr, cfg.TLS)
	} else {
		c, err = d.Dial("tcp", cfg.Addr)
	}
	if err != nil {
		return nil, err
	}
	conn := &Conn{c: c, r: bufio.NewReader(c), timeout: cfg.Timeout}
	if cfg.Password != "" {
		args := []string{"AUTH", cfg.Password}
		if cfg.User != "" {
			args = []string{"AUTH", cfg.User, cfg.Password}
		}
		if _, err := conn.Do(args...); err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("AUTH: %w", err)
		}
	}
	return conn, nil
}

// Close closes the connection.
func (c *Conn) Close() error { return c.c.Close() }

// Do sends one command and returns its reply: a string (simple or bulk),
// an int64, nil (a null bulk or array) or a []any of those. An error
// reply is returned as a ReplyError; inside an array it stays a value.
func (c *Conn) Do(args ...string) (any, error) {
	if err := c.c.SetDeadline(time.Now().Add(c.timeout)); err != nil {
		return nil, err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(c.c, b.String()); err != nil {
		return nil, err
	}
	v, err := c.read()
	if err != nil {
		return nil, err
	}
	if e, ok := v.(ReplyError); ok {
		return nil, e
	}
	return v, nil
}

// read reads one reply.
func (c *Conn) read() (any, error) {
	line, err := c.r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return nil, errors.New("redistest: empty reply line")
	}
	body := line[1:]
	switch line[0] {
	case '+':
		return body, nil
	case '-':
		return ReplyError(body), nil
	case ':':
		return strconv.ParseInt(body, 10, 64)
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil || n < 0 {
			return nil, err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(c.r, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil || n < 0 {
			return nil, err
		}
		out := make([]any, n)
		for i := range out {
			if out[i], err = c.read(); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("redistest: unknown reply %q", line)
}

// parseInfo returns the fields of an INFO reply (key:value lines).
func parseInfo(s string) map[string]string {
	m := make(map[string]string)
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && !strings.HasPrefix(k, "#") {
			m[k] = v
		}
	}
	return m
}
