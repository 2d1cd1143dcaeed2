package grpcserver

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// bytesConn is a client that sends fixed bytes, then leaves; what the
// server writes is counted and dropped.
type bytesConn struct {
	r   *bytes.Reader
	out atomic.Int64
}

func (c *bytesConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c *bytesConn) Write(p []byte) (int, error)      { c.out.Add(int64(len(p))); return len(p), nil }
func (c *bytesConn) Close() error                     { return nil }
func (c *bytesConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *bytesConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *bytesConn) SetDeadline(time.Time) error      { return nil }
func (c *bytesConn) SetReadDeadline(time.Time) error  { return nil }
func (c *bytesConn) SetWriteDeadline(time.Time) error { return nil }

// FuzzConn feeds a connection arbitrary bytes after the client preface,
// seeded with every attack of TestAttacks. Whatever the bytes: the server
// never panics; the connection ends when the bytes do (no call left
// waiting for data that will not come holds it open); it writes at most
// fuzzAmplification times what it read, plus its SETTINGS; and no more
// handlers run at once than MaxConcurrentStreams.
func FuzzConn(f *testing.F) {
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, kv := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/test.Attack/Slow"}, {"content-type", "application/grpc"}, {"grpc-timeout", "1S"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
	}
	call := appendFrame(nil, frameSettings, 0, 0, nil)
	call = appendFrame(call, frameHeaders, flagEndHeaders, 1, hb.Bytes())
	call = appendFrame(call, frameData, flagEndStream, 1, []byte{0, 0, 0, 0, 3, 'a', 'b', 'c'})
	f.Add(call)
	f.Add(appendFrame(nil, frameHeaders, 0, 1, hb.Bytes()))                    // no END_HEADERS, then nothing
	f.Add(appendFrame(nil, frameData, flagPadded|flagEndStream, 1, []byte{9})) // padding past the end
	f.Add(appendFrame(nil, frameWindowUpdate, 0, 0, []byte{0x7f, 0xff, 0xff, 0xff}))
	for _, at := range attacks {
		f.Add(attackBytes(at))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, inline := range []bool{true, false} {
			var running, most atomic.Int64
			slow := time.Millisecond
			if inline {
				slow = 0
			}
			srv := New(Options{Inline: inline, MaxConcurrentStreams: fuzzMaxStreams, MaxRecvMsgSize: 1 << 16})
			srv.RegisterService(attackDesc(&running, &most, slow), struct{}{})
			nc := &bytesConn{r: bytes.NewReader(append([]byte(clientPreface), b...))}
			c := newConn(srv, nc)
			done := make(chan struct{})
			go func() { c.serve(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("the connection did not end with its bytes")
			}
			srv.handlers.Wait()
			if out, limit := nc.out.Load(), int64(fuzzAmplification*len(b)+4096); out > limit {
				t.Errorf("the server wrote %d bytes for %d read, want ≤ %d", out, len(b), limit)
			}
			if n := most.Load(); n > fuzzMaxStreams {
				t.Errorf("%d handlers ran at once, want ≤ %d", n, fuzzMaxStreams)
			}
		}
	})
}

// Bounds FuzzConn holds the server to. An answer's headers and trailers
// outweigh the few bytes of a request made of indexed header fields.
const (
	fuzzMaxStreams    = 8
	fuzzAmplification = 16
)

// attackBytes is what attack at writes, cut at 32 KiB.
func attackBytes(at attack) []byte {
	var out bytes.Buffer
	a := &attacker{}
	a.bw = bufio.NewWriterSize(countWriter{&limitWriter{w: &out, n: 32 << 10}, &a.n, 0}, 4<<10)
	a.fr = http2.NewFramer(a.bw, nil)
	a.fr.AllowIllegalWrites = true
	a.enc = hpack.NewEncoder(&a.hb)
	_ = a.fr.WriteSettings()
	_ = at.run(a, time.Now().Add(time.Second))
	return out.Bytes()
}

// limitWriter takes n bytes, then fails.
type limitWriter struct {
	w io.Writer
	n int
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if len(p) > l.n {
		p = p[:l.n]
	}
	n, err := l.w.Write(p)
	l.n -= n
	if err == nil && l.n == 0 {
		err = io.ErrShortWrite
	}
	return n, err
}

func appendFrame(b []byte, typ, flags byte, id uint32, payload []byte) []byte {
	return append(appendFrameHeader(b, len(payload), typ, flags, id), payload...)
}
