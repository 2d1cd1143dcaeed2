package grpcserver

import (
	"bytes"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2/hpack"
)

// bytesConn is a client that sends fixed bytes, then leaves; what the
// server writes is dropped.
type bytesConn struct{ r *bytes.Reader }

func (c *bytesConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c *bytesConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *bytesConn) Close() error                     { return nil }
func (c *bytesConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *bytesConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *bytesConn) SetDeadline(time.Time) error      { return nil }
func (c *bytesConn) SetReadDeadline(time.Time) error  { return nil }
func (c *bytesConn) SetWriteDeadline(time.Time) error { return nil }

// FuzzConn feeds a connection arbitrary bytes after the client preface: the
// server never panics, and the connection ends when the bytes do (no call
// left waiting for data that will not come holds it open).
func FuzzConn(f *testing.F) {
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, kv := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/test.Raw/Call"}, {"content-type", "application/grpc"}, {"grpc-timeout", "1S"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
	}
	call := appendFrame(nil, frameSettings, 0, 0, nil)
	call = appendFrame(call, frameHeaders, flagEndHeaders, 1, hb.Bytes())
	call = appendFrame(call, frameData, flagEndStream, 1, []byte{0, 0, 0, 0, 3, 'a', 'b', 'c'})
	f.Add(call)
	f.Add(appendFrame(nil, frameHeaders, 0, 1, hb.Bytes()))                    // no END_HEADERS, then nothing
	f.Add(appendFrame(nil, frameData, flagPadded|flagEndStream, 1, []byte{9})) // padding past the end
	f.Add(appendFrame(nil, frameWindowUpdate, 0, 0, []byte{0x7f, 0xff, 0xff, 0xff}))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, inline := range []bool{true, false} {
			o := Options{Inline: inline, Codec: rawCodec{}, MaxRecvMsgSize: 1 << 16}
			srv := New(o)
			srv.RegisterService(&rawDesc, struct{}{})
			c := newConn(srv, &bytesConn{r: bytes.NewReader(append([]byte(clientPreface), b...))})
			done := make(chan struct{})
			go func() { c.serve(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("the connection did not end with its bytes")
			}
		}
	})
}

func appendFrame(b []byte, typ, flags byte, id uint32, payload []byte) []byte {
	return append(appendFrameHeader(b, len(payload), typ, flags, id), payload...)
}
