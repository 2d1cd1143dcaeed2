package grpcserver

import (
	"errors"
	"io"

	"golang.org/x/net/http2"
)

// maxFrameSize is the largest frame this side accepts
// (SETTINGS_MAX_FRAME_SIZE).
const maxFrameSize = 1 << 20

// frame is the frame just read; payload is valid until the next read.
// golang.org/x/net/http2's Framer allocates a frame object for most frames
// (one HEADERS a call); this reader allocates nothing.
type frame struct {
	typ, flags byte
	id         uint32
	length     uint32 // as on the wire: flow control counts padding too
	payload    []byte // DATA and HEADERS: without padding and priority
	dep        uint32 // HEADERS with PRIORITY: the stream it depends on
	consumed   int    // bytes to discard from the reader after handling
}

// Flags besides END_STREAM, END_HEADERS and ACK.
const (
	flagPadded   = 0x8
	flagPriority = 0x20
	framePrio    = 0x2
	framePush    = 0x5
)

// readFrame reads and checks the next frame. A protocol error is an
// http2.ConnectionError.
func (c *conn) readFrame() (*frame, error) {
	f := &c.frame
	if f.consumed > 0 {
		_, _ = c.br.Discard(f.consumed)
		f.consumed = 0
	}
	h, err := c.br.Peek(9)
	if err != nil {
		if len(h) > 0 && errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	f.length = uint32(h[0])<<16 | uint32(h[1])<<8 | uint32(h[2])
	f.typ, f.flags = h[3], h[4]
	f.id = (uint32(h[5])<<24 | uint32(h[6])<<16 | uint32(h[7])<<8 | uint32(h[8])) & (1<<31 - 1)
	if f.length > maxFrameSize {
		return nil, http2.ConnectionError(http2.ErrCodeFrameSize)
	}
	_, _ = c.br.Discard(9)
	n := int(f.length)
	if n <= c.br.Size() {
		if f.payload, err = c.br.Peek(n); err != nil {
			return nil, unexpected(err)
		}
		f.consumed = n
	} else {
		if cap(c.big) < n {
			c.big = make([]byte, n)
		}
		f.payload = c.big[:n]
		if _, err := io.ReadFull(c.br, f.payload); err != nil {
			return nil, unexpected(err)
		}
	}
	if c.contID != 0 && (f.typ != frameContinuation || f.id != c.contID) ||
		c.contID == 0 && f.typ == frameContinuation {
		return nil, http2.ConnectionError(http2.ErrCodeProtocol) // §6.10
	}
	return f, c.checkFrame(f)
}

func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// checkFrame checks a frame's size and stream against its type (RFC 9113
// §6), and strips padding and priority.
func (c *conn) checkFrame(f *frame) error {
	protocol := http2.ConnectionError(http2.ErrCodeProtocol)
	size := http2.ConnectionError(http2.ErrCodeFrameSize)
	switch f.typ {
	case frameData, frameHeaders:
		if f.id == 0 {
			return protocol
		}
		p := f.payload
		if f.flags&flagPadded != 0 {
			if len(p) < 1 || int(p[0]) > len(p)-1 {
				return protocol
			}
			p = p[1 : len(p)-int(p[0])]
		}
		if f.typ == frameHeaders && f.flags&flagPriority != 0 {
			if len(p) < 5 {
				return size
			}
			f.dep = u32(p) & (1<<31 - 1)
			p = p[5:]
		}
		f.payload = p
	case frameContinuation, framePrio:
		if f.id == 0 {
			return protocol
		}
		if f.typ == framePrio && f.length != 5 {
			return size
		}
	case frameRSTStream:
		if f.id == 0 {
			return protocol
		}
		if f.length != 4 {
			return size
		}
	case frameSettings:
		if f.id != 0 {
			return protocol
		}
		if f.flags&flagAck != 0 && f.length != 0 || f.length%6 != 0 {
			return size
		}
	case framePing:
		if f.id != 0 {
			return protocol
		}
		if f.length != 8 {
			return size
		}
	case frameGoAway:
		if f.id != 0 {
			return protocol
		}
		if f.length < 8 {
			return size
		}
	case frameWindowUpdate:
		if f.length != 4 {
			return size
		}
	case framePush:
		return protocol
	}
	return nil
}

// u32 reads a big-endian 32-bit value.
func u32(b []byte) uint32 {
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}
