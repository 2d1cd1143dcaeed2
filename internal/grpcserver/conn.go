package grpcserver

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Flow-control windows this side grants (RFC 9113 §6.9): per call, and for
// the connection. Calls are answered as they arrive, so the windows bound
// throughput only, not memory; memory is bounded by MaxRecvMsgSize per
// call.
const (
	streamRecvWindow  = 1 << 20
	connRecvWindow    = 4 << 20
	defaultWindow     = 65535 // before SETTINGS
	maxHeaderListSize = 1 << 20
	readBufferSize    = 64 << 10
	// closeGrace is how long a connection that sent its last frame waits
	// for the client to close before it closes itself.
	closeGrace = time.Second
	// drainPingTimeout bounds the wait for the ping that follows the first
	// GOAWAY of a graceful close.
	drainPingTimeout = time.Second
)

const clientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// drainPing is the payload of the ping a graceful close sends after its
// first GOAWAY.
var drainPing = [8]byte{'d', 'r', 'a', 'i', 'n', 'i', 'n', 'g'}

// conn is one HTTP/2 connection.
type conn struct {
	s      *Server
	nc     net.Conn
	br     *bufio.Reader
	frame  frame
	big    []byte // a frame larger than the read buffer
	contID uint32 // the stream whose CONTINUATION must come next; 0: none
	hdec   *hpack.Decoder
	ctx    context.Context // cancelled when the connection closes
	cancel context.CancelFunc

	// Owned by the reader.
	hdr         *stream // the stream whose header block is being read; nil: discard it
	hdrEnd      bool    // its HEADERS carried END_STREAM
	hdrTrailers bool    // the block ends a stream already open
	hdrSize     int
	recvUnacked uint32
	scratch     []byte // inline answers are encoded here

	mu           sync.Mutex
	cond         sync.Cond // on mu: a send window grew, an inbox filled, or the connection closed
	streams      map[uint32]*stream
	lastStream   uint32 // the highest stream opened
	wbuf, wspare []byte
	flushing     bool
	werr         error
	henc         *hpack.Encoder
	hbuf         bytes.Buffer
	hfield       hpack.HeaderField
	sendWin      int64 // connection send window
	peerInitWin  int64
	peerMaxFrame uint32
	blocked      []*stream // answers waiting for window, in order
	draining     int       // 0, 1: first GOAWAY sent, 2: last GOAWAY sent
	closed       bool

	closeWhenFlushed, writeClosed bool
}

func newConn(s *Server, nc net.Conn) *conn {
	c := &conn{
		s:            s,
		nc:           nc,
		br:           bufio.NewReaderSize(nc, readBufferSize),
		streams:      map[uint32]*stream{},
		sendWin:      defaultWindow,
		peerInitWin:  defaultWindow,
		peerMaxFrame: 16384,
		wbuf:         make([]byte, 0, 16<<10),
		wspare:       make([]byte, 0, 16<<10),
	}
	c.cond.L = &c.mu
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.hdec = hpack.NewDecoder(4096, c.onField)
	c.hdec.SetMaxStringLength(maxHeaderListSize)
	c.henc = hpack.NewEncoder(&c.hbuf)
	return c
}

// serve runs the connection until the client leaves, a protocol error, or
// the server closes it.
func (c *conn) serve() {
	defer c.shutdown()
	_ = c.nc.SetReadDeadline(time.Now().Add(defaultHandshakeTimeout))
	var preface [len(clientPreface)]byte
	if _, err := io.ReadFull(c.br, preface[:]); err != nil || string(preface[:]) != clientPreface {
		return
	}
	_ = c.nc.SetReadDeadline(time.Time{})
	c.mu.Lock()
	settings := []http2.Setting{
		{ID: http2.SettingMaxConcurrentStreams, Val: c.s.o.MaxConcurrentStreams},
		{ID: http2.SettingInitialWindowSize, Val: streamRecvWindow},
		{ID: http2.SettingMaxFrameSize, Val: maxFrameSize},
		{ID: http2.SettingMaxHeaderListSize, Val: maxHeaderListSize},
	}
	c.wbuf = appendFrameHeader(c.wbuf, 6*len(settings), frameSettings, 0, 0)
	for _, st := range settings {
		c.wbuf = append(c.wbuf, byte(st.ID>>8), byte(st.ID), byte(st.Val>>24), byte(st.Val>>16), byte(st.Val>>8), byte(st.Val))
	}
	c.writeWindowUpdateLocked(0, connRecvWindow-defaultWindow)
	c.mu.Unlock()
	c.flush()

	for {
		f, err := c.readFrame()
		if err == nil {
			err = c.onFrame(f)
		}
		if err != nil {
			c.readError(err)
			return
		}
		if c.br.Buffered() == c.frame.consumed {
			c.flush() // nothing more to read without waiting
		}
	}
}

// readError ends the connection after a read failure: a protocol error is
// answered with GOAWAY.
func (c *conn) readError(err error) {
	var ce http2.ConnectionError
	code := http2.ErrCode(0)
	switch {
	case errors.As(err, &ce):
		code = http2.ErrCode(ce)
	default:
		return // the client left, or the connection was closed
	}
	c.mu.Lock()
	c.writeGoAwayLocked(c.lastStream, code)
	c.mu.Unlock()
	c.flush()
}

// onFrame handles one frame; an error ends the connection.
func (c *conn) onFrame(f *frame) error {
	switch f.typ {
	case frameHeaders:
		return c.onHeaders(f)
	case frameContinuation:
		end := f.flags&flagEndHeaders != 0
		if end {
			c.contID = 0
		}
		return c.onHeaderBlock(f.payload, end)
	case frameData:
		return c.onData(f)
	case frameSettings:
		return c.onSettings(f)
	case frameWindowUpdate:
		return c.onWindowUpdate(f)
	case framePing:
		c.onPing(f)
	case frameRSTStream:
		c.onReset(f.id)
	}
	// PRIORITY, GOAWAY (the client leaves: its calls end on their own) and
	// unknown frames need nothing.
	return nil
}

func (c *conn) onSettings(f *frame) error {
	if f.flags&flagAck != 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for p := f.payload; len(p) >= 6; p = p[6:] {
		s := http2.Setting{ID: http2.SettingID(uint16(p[0])<<8 | uint16(p[1])), Val: u32(p[2:])}
		if err := s.Valid(); err != nil {
			return err
		}
		switch s.ID {
		case http2.SettingInitialWindowSize:
			delta := int64(s.Val) - c.peerInitWin
			c.peerInitWin = int64(s.Val)
			for _, st := range c.streams {
				st.sendWin += delta
			}
		case http2.SettingMaxFrameSize:
			c.peerMaxFrame = s.Val
		case http2.SettingHeaderTableSize:
			c.henc.SetMaxDynamicTableSizeLimit(s.Val)
		}
	}
	c.writeFrameLocked(frameSettings, flagAck, 0, nil)
	c.unblockLocked()
	return nil
}

func (c *conn) onWindowUpdate(f *frame) error {
	inc := int64(u32(f.payload) & (1<<31 - 1))
	c.mu.Lock()
	defer c.mu.Unlock()
	if f.id == 0 {
		if inc == 0 || c.sendWin+inc > 1<<31-1 {
			return http2.ConnectionError(http2.ErrCodeFlowControl)
		}
		c.sendWin += inc
	} else if st := c.streams[f.id]; st != nil {
		st.sendWin += inc
	}
	c.unblockLocked()
	return nil
}

func (c *conn) onPing(f *frame) {
	if f.flags&flagAck != 0 {
		if string(f.payload) == string(drainPing[:]) {
			c.finishDrain()
		}
		return
	}
	c.mu.Lock()
	c.writeFrameLocked(framePing, flagAck, 0, f.payload)
	c.mu.Unlock()
}

// onReset ends a call the client cancelled.
func (c *conn) onReset(id uint32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st := c.streams[id]; st != nil {
		st.reset = true
		c.endStreamLocked(st)
	}
}

// unblockLocked sends the answers that waited for window, in order, as far
// as the windows now allow, and wakes the streams waiting to send.
func (c *conn) unblockLocked() {
	n := 0
	for _, st := range c.blocked {
		if st.done {
			continue
		}
		st.pending = c.sendDataLocked(st, st.pending)
		if len(st.pending) > 0 {
			c.blocked[n] = st
			n++
			continue
		}
		c.writeTrailersLocked(st, okStatus, nil) // only an answer waits for window
		c.endStreamLocked(st)
	}
	clear(c.blocked[n:])
	c.blocked = c.blocked[:n]
	c.cond.Broadcast()
}

// drain begins a graceful close: a GOAWAY that admits every stream, and a
// ping; when the ping's answer comes (the client has seen the GOAWAY and
// opens no more calls), finishDrain sends the last GOAWAY.
func (c *conn) drain() {
	c.mu.Lock()
	if c.draining > 0 || c.closed {
		c.mu.Unlock()
		return
	}
	c.draining = 1
	c.writeGoAwayLocked(1<<31-1, http2.ErrCodeNo)
	c.writeFrameLocked(framePing, 0, 0, drainPing[:])
	c.mu.Unlock()
	c.flush()
	time.AfterFunc(drainPingTimeout, c.finishDrain)
}

// finishDrain sends the last GOAWAY, naming the last stream opened; the
// connection closes once the streams up to it have ended.
func (c *conn) finishDrain() {
	c.mu.Lock()
	if c.draining != 1 {
		c.mu.Unlock()
		return
	}
	c.draining = 2
	c.writeGoAwayLocked(c.lastStream, http2.ErrCodeNo)
	if len(c.streams) == 0 {
		c.closeWhenFlushed = true
	}
	c.mu.Unlock()
	c.flush()
}

// closeWrite ends a drained connection: no more frames will be sent, and
// the reader waits closeGrace for the client to close.
func (c *conn) closeWrite() {
	if cw, ok := c.nc.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_ = c.nc.SetReadDeadline(time.Now().Add(closeGrace))
}

// kill closes the connection at once.
func (c *conn) kill() { _ = c.nc.Close() }

// shutdown runs when the reader stops: calls still running see their
// contexts cancelled, and writers waiting for window give up.
func (c *conn) shutdown() {
	c.cancel()
	c.mu.Lock()
	c.closed = true
	if c.werr == nil {
		c.werr = net.ErrClosed
	}
	for _, st := range c.streams {
		st.reset = true
		if st.cancel != nil {
			st.cancel()
		}
	}
	c.cond.Broadcast()
	c.mu.Unlock()
	_ = c.nc.Close()
}
