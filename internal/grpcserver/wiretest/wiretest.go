package wiretest

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2/hpack"
)

// Server is what wiretest needs of a gRPC server (*grpcserver.Server,
// *grpc.Server).
type Server interface {
	Serve(net.Listener) error
	Stop()
}

// Client is one HTTP/2 connection to a Server, making one call at a time.
type Client struct {
	tb   testing.TB
	conn *memConn
	done chan error

	next    uint32 // the next stream id
	henc    *hpack.Encoder
	hbuf    bytes.Buffer
	hdec    *hpack.Decoder
	out     []byte // frames to send
	in      []byte // frames received, not yet parsed
	resp    []byte // the answer's message bytes
	status  string // the answer's grpc-status
	credit  uint32 // DATA bytes received, not yet returned by WINDOW_UPDATE
	timeout string
}

// Dial serves srv on an in-memory connection and returns its client; srv
// is stopped when the test ends.
func Dial(tb testing.TB, srv Server) *Client {
	tb.Helper()
	c := &Client{tb: tb, conn: newMemConn(), done: make(chan error, 1), next: 1}
	c.henc = hpack.NewEncoder(&c.hbuf)
	c.hdec = hpack.NewDecoder(4096, func(f hpack.HeaderField) {
		if f.Name == "grpc-status" {
			c.status = f.Value
		}
	})
	lis := &oneListener{conn: c.conn, closed: make(chan struct{})}
	go func() { c.done <- srv.Serve(lis) }()
	tb.Cleanup(func() {
		srv.Stop()
		_ = c.conn.Close()
		if err := <-c.done; err != nil {
			tb.Errorf("wiretest: Serve: %v", err)
		}
	})
	c.out = append(c.out, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"...)
	c.out = appendFrame(c.out, 0x4, 0, 0, nil) // SETTINGS, defaults
	c.out = appendWindowUpdate(c.out, 0, 1<<30)
	return c
}

// WithTimeout sends grpc-timeout with every call ("1S"); "" sends none.
func (c *Client) WithTimeout(v string) *Client { c.timeout = v; return c }

// Call makes one unary call of method ("/pkg.Service/Method") with the
// request message req and returns the answer's message (valid until the
// next call) and its grpc-status.
func (c *Client) Call(method string, req []byte) ([]byte, string, error) {
	id := c.next
	c.next += 2
	c.hbuf.Reset()
	c.field(":method", "POST")
	c.field(":scheme", "http")
	c.field(":path", method)
	c.field(":authority", "wiretest")
	c.field("content-type", "application/grpc")
	c.field("te", "trailers")
	if c.timeout != "" {
		c.field("grpc-timeout", c.timeout)
	}
	if c.credit > 0 {
		c.out = appendWindowUpdate(c.out, 0, c.credit)
		c.credit = 0
	}
	c.out = appendFrame(c.out, 0x1, 0x4, id, c.hbuf.Bytes()) // HEADERS, END_HEADERS
	n := len(req)
	c.out = appendFrameHeader(c.out, 5+n, 0x0, 0x1, id) // DATA, END_STREAM
	c.out = append(c.out, 0, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	c.out = append(c.out, req...)
	c.conn.send(c.out)
	c.out = c.out[:0]
	c.resp, c.status = c.resp[:0], ""
	for {
		done, err := c.parse(id)
		if err != nil || done {
			if len(c.resp) >= 5 {
				return c.resp[5:], c.status, err
			}
			return nil, c.status, err
		}
		if c.in, err = c.conn.receive(c.in); err != nil {
			return nil, "", err
		}
	}
}

func (c *Client) field(name, value string) {
	_ = c.henc.WriteField(hpack.HeaderField{Name: name, Value: value})
}

// parse reads the complete frames received; it reports whether stream id
// has ended.
func (c *Client) parse(id uint32) (bool, error) {
	done := false
	for len(c.in) >= 9 {
		n := int(c.in[0])<<16 | int(c.in[1])<<8 | int(c.in[2])
		if len(c.in) < 9+n {
			break
		}
		typ, flags := c.in[3], c.in[4]
		sid := uint32(c.in[5]&0x7f)<<24 | uint32(c.in[6])<<16 | uint32(c.in[7])<<8 | uint32(c.in[8])
		payload := c.in[9 : 9+n]
		switch typ {
		case 0x0: // DATA
			c.credit += uint32(n)
			if sid == id {
				c.resp = append(c.resp, payload...)
			}
		case 0x1, 0x9: // HEADERS, CONTINUATION
			if _, err := c.hdec.Write(payload); err != nil {
				return false, err
			}
			if flags&0x4 != 0 {
				if err := c.hdec.Close(); err != nil {
					return false, err
				}
			}
			if sid == id && typ == 0x1 && flags&0x1 != 0 {
				done = true
			}
		case 0x4: // SETTINGS
			if flags&0x1 == 0 {
				c.out = appendFrame(c.out, 0x4, 0x1, 0, nil)
			}
		case 0x3: // RST_STREAM
			if sid == id {
				return true, errors.New("wiretest: the server reset the call")
			}
		case 0x7: // GOAWAY
			return true, errors.New("wiretest: the server sent GOAWAY")
		}
		c.in = c.in[:copy(c.in, c.in[9+n:])]
	}
	return done, nil
}

func appendFrameHeader(b []byte, n int, typ, flags byte, id uint32) []byte {
	return append(b, byte(n>>16), byte(n>>8), byte(n), typ, flags, byte(id>>24)&0x7f, byte(id>>16), byte(id>>8), byte(id))
}

func appendFrame(b []byte, typ, flags byte, id uint32, payload []byte) []byte {
	return append(appendFrameHeader(b, len(payload), typ, flags, id), payload...)
}

func appendWindowUpdate(b []byte, id, n uint32) []byte {
	return append(appendFrameHeader(b, 4, 0x8, 0, id), byte(n>>24)&0x7f, byte(n>>16), byte(n>>8), byte(n))
}

// memConn is the server's end of the in-memory connection.
type memConn struct {
	mu       sync.Mutex
	toServer []byte
	toClient []byte
	closed   bool
	wake     chan struct{} // the server has bytes to read
	answer   chan struct{} // the client has bytes to read
}

func newMemConn() *memConn {
	return &memConn{wake: make(chan struct{}, 1), answer: make(chan struct{}, 1)}
}

func (m *memConn) send(b []byte) {
	m.mu.Lock()
	m.toServer = append(m.toServer, b...)
	m.mu.Unlock()
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// receive appends what the server wrote to b, waiting for some.
func (m *memConn) receive(b []byte) ([]byte, error) {
	for {
		m.mu.Lock()
		if len(m.toClient) > 0 {
			b = append(b, m.toClient...)
			m.toClient = m.toClient[:0]
			m.mu.Unlock()
			return b, nil
		}
		closed := m.closed
		m.mu.Unlock()
		if closed {
			return b, io.EOF
		}
		<-m.answer
	}
}

func (m *memConn) Read(p []byte) (int, error) {
	for {
		m.mu.Lock()
		if len(m.toServer) > 0 {
			n := copy(p, m.toServer)
			m.toServer = m.toServer[:copy(m.toServer, m.toServer[n:])]
			m.mu.Unlock()
			return n, nil
		}
		closed := m.closed
		m.mu.Unlock()
		if closed {
			return 0, io.EOF
		}
		<-m.wake
	}
}

func (m *memConn) Write(p []byte) (int, error) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return 0, net.ErrClosed
	}
	m.toClient = append(m.toClient, p...)
	m.mu.Unlock()
	select {
	case m.answer <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (m *memConn) Close() error {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	select {
	case m.wake <- struct{}{}:
	default:
	}
	select {
	case m.answer <- struct{}{}:
	default:
	}
	return nil
}

func (m *memConn) LocalAddr() net.Addr              { return memAddr{} }
func (m *memConn) RemoteAddr() net.Addr             { return memAddr{} }
func (m *memConn) SetDeadline(time.Time) error      { return nil }
func (m *memConn) SetReadDeadline(time.Time) error  { return nil }
func (m *memConn) SetWriteDeadline(time.Time) error { return nil }

type memAddr struct{}

func (memAddr) Network() string { return "memory" }
func (memAddr) String() string  { return "wiretest" }

// oneListener hands out one connection, then waits until closed.
type oneListener struct {
	conn   *memConn
	once   sync.Once
	given  bool
	closed chan struct{}
}

func (l *oneListener) Accept() (net.Conn, error) {
	if !l.given {
		l.given = true
		return l.conn, nil
	}
	<-l.closed
	return nil, net.ErrClosed
}

func (l *oneListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *oneListener) Addr() net.Addr { return memAddr{} }
