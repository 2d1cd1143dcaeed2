package grpcserver

import (
	"encoding/base64"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Frame types and flags (RFC 9113 §6).
const (
	frameData         = 0x0
	frameHeaders      = 0x1
	frameRSTStream    = 0x3
	frameSettings     = 0x4
	framePing         = 0x6
	frameGoAway       = 0x7
	frameWindowUpdate = 0x8
	frameContinuation = 0x9

	flagEndStream  = 0x1
	flagAck        = 0x1
	flagEndHeaders = 0x4
)

// statusCodes are the grpc-status values of codes 0..16.
var statusCodes = func() []string {
	s := make([]string, 17)
	for i := range s {
		s[i] = strconv.Itoa(i)
	}
	return s
}()

// appendFrameHeader appends a frame's 9-byte header.
func appendFrameHeader(b []byte, length int, typ, flags byte, id uint32) []byte {
	return append(b, byte(length>>16), byte(length>>8), byte(length), typ, flags,
		byte(id>>24)&0x7f, byte(id>>16), byte(id>>8), byte(id))
}

// The methods below append frames to c.wbuf; c.mu must be held.

func (c *conn) writeFrameLocked(typ, flags byte, id uint32, payload []byte) {
	c.wbuf = appendFrameHeader(c.wbuf, len(payload), typ, flags, id)
	c.wbuf = append(c.wbuf, payload...)
}

func (c *conn) writeWindowUpdateLocked(id, n uint32) {
	c.wbuf = appendFrameHeader(c.wbuf, 4, frameWindowUpdate, 0, id)
	c.wbuf = append(c.wbuf, byte(n>>24)&0x7f, byte(n>>16), byte(n>>8), byte(n))
}

func (c *conn) writeRSTLocked(id uint32, code http2.ErrCode) {
	c.wbuf = appendFrameHeader(c.wbuf, 4, frameRSTStream, 0, id)
	c.wbuf = append(c.wbuf, byte(code>>24), byte(code>>16), byte(code>>8), byte(code))
}

func (c *conn) writeGoAwayLocked(last uint32, code http2.ErrCode, debug string) {
	c.wbuf = appendFrameHeader(c.wbuf, 8+len(debug), frameGoAway, 0, 0)
	c.wbuf = append(c.wbuf, byte(last>>24)&0x7f, byte(last>>16), byte(last>>8), byte(last),
		byte(code>>24), byte(code>>16), byte(code>>8), byte(code))
	c.wbuf = append(c.wbuf, debug...)
}

// field encodes one header field into the header block being built.
func (c *conn) field(name, value string) {
	c.hfield.Name, c.hfield.Value = name, value
	_ = c.henc.WriteField(c.hfield) // writes to a bytes.Buffer: no error
}

// writeHeaderBlockLocked frames the header block in c.hbuf as HEADERS and
// as many CONTINUATION frames as the peer's frame size needs.
func (c *conn) writeHeaderBlockLocked(id uint32, endStream bool) {
	block := c.hbuf.Bytes()
	typ, flags := byte(frameHeaders), byte(0)
	if endStream {
		flags = flagEndStream
	}
	for {
		n := min(len(block), int(c.peerMaxFrame))
		if n == len(block) {
			flags |= flagEndHeaders
		}
		c.writeFrameLocked(typ, flags, id, block[:n])
		block = block[n:]
		if len(block) == 0 {
			break
		}
		typ, flags = frameContinuation, 0
	}
	c.hbuf.Reset()
	c.sentSincePing = true
}

// writeResponseHeadersLocked sends the response headers of st, with md.
func (c *conn) writeResponseHeadersLocked(st *stream, md metadata.MD) {
	c.field(":status", "200")
	c.field("content-type", "application/grpc")
	c.mdFields(md)
	c.writeHeaderBlockLocked(st.id, false)
	st.headerSent = true
}

// writeTrailersLocked ends st with its status: trailers after a response,
// or Trailers-Only when no header was sent.
func (c *conn) writeTrailersLocked(st *stream, stat *status.Status, md metadata.MD) {
	if !st.headerSent {
		c.field(":status", "200")
		c.field("content-type", "application/grpc")
	}
	code := int(stat.Code())
	if code >= 0 && code < len(statusCodes) {
		c.field("grpc-status", statusCodes[code])
	} else {
		c.field("grpc-status", strconv.Itoa(code))
	}
	if msg := stat.Message(); msg != "" {
		c.field("grpc-message", encodeGRPCMessage(msg))
	}
	if d := statusDetails(stat); d != "" {
		c.field("grpc-status-details-bin", d)
	}
	c.mdFields(md)
	c.writeHeaderBlockLocked(st.id, true)
}

// mdFields encodes metadata a handler set, as grpc-go does: keys lower
// case, reserved ones dropped, -bin values in base64.
func (c *conn) mdFields(md metadata.MD) {
	for k, vs := range md {
		k = strings.ToLower(k)
		if isReservedHeader(k) {
			continue
		}
		for _, v := range vs {
			if strings.HasSuffix(k, "-bin") {
				v = base64.RawStdEncoding.EncodeToString([]byte(v))
			}
			c.field(k, v)
		}
	}
}

// isReservedHeader reports a header gRPC sets itself, which metadata may
// not set.
func isReservedHeader(k string) bool {
	if k != "" && k[0] == ':' {
		return true
	}
	switch k {
	case "content-type", "user-agent", "grpc-message-type", "grpc-encoding", "grpc-message",
		"grpc-status", "grpc-timeout", "grpc-status-details-bin", "te":
		return true
	}
	return false
}

// sendDataLocked sends as much of data as the connection's and st's send
// windows allow, in frames of the peer's size, and returns the rest.
func (c *conn) sendDataLocked(st *stream, data []byte) []byte {
	for len(data) > 0 && c.sendWin > 0 && st.sendWin > 0 {
		n := min(int64(len(data)), c.sendWin, st.sendWin, int64(c.peerMaxFrame))
		c.writeFrameLocked(frameData, 0, st.id, data[:n])
		c.sendWin -= n
		st.sendWin -= n
		data = data[n:]
		c.sentSincePing = true
		c.windowCredit = min(c.windowCredit+2, junkBurst)
	}
	return data
}

// flush writes what the buffer holds. One caller writes at a time; a
// caller that finds a write under way leaves its frames to it. A write
// that makes no progress for Keepalive.Timeout fails, and closes the
// connection.
func (c *conn) flush() {
	c.mu.Lock()
	if c.flushing || len(c.wbuf) == 0 {
		c.mu.Unlock()
		return
	}
	c.flushing = true
	for len(c.wbuf) > 0 && c.werr == nil {
		buf := c.wbuf
		c.wbuf = c.wspare[:0]
		c.armWriteDeadlineLocked()
		c.mu.Unlock()
		_, err := c.nc.Write(buf)
		c.mu.Lock()
		c.wspare = buf[:0]
		if err != nil {
			c.werr = err
		}
	}
	failed := c.werr != nil
	if failed {
		c.wbuf = c.wbuf[:0]
	}
	c.flushing = false
	c.cond.Broadcast() // a reader waiting for the queue to drain
	closeWrite := c.closeWhenFlushed && !c.writeClosed && len(c.wbuf) == 0
	if closeWrite {
		c.writeClosed = true
	}
	c.mu.Unlock()
	switch {
	case failed:
		c.kill()
	case closeWrite:
		c.closeWrite()
	}
}

// armWriteDeadlineLocked keeps a write deadline Keepalive.Timeout ahead.
// It is moved only when half of it has passed: moving it costs a timer
// update in the runtime, and most flushes take microseconds.
func (c *conn) armWriteDeadlineLocked() {
	timeout := c.s.o.Keepalive.Timeout
	now := time.Now()
	if c.writeDeadline.Sub(now) > timeout/2 {
		return
	}
	c.writeDeadline = now.Add(timeout)
	_ = c.nc.SetWriteDeadline(c.writeDeadline)
}
