package grpcserver

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Flow-control windows this side grants (RFC 9113 §6.9): per call, and for
// the connection. DATA beyond them is a FLOW_CONTROL_ERROR. They are
// granted again as the bytes arrive (as grpc-go grants the connection's),
// so they bound throughput; memory is bounded by MaxRecvMsgSize per call
// and maxConnBuffered per connection.
const (
	streamRecvWindow = 1 << 20
	connRecvWindow   = 4 << 20
	defaultWindow    = 65535 // before SETTINGS
	maxWindow        = 1<<31 - 1
	readBufferSize   = 64 << 10
	// busyBatch is a batch of frames large enough that its connection
	// yields its core before reading the next (runtime.Gosched).
	busyBatch = 64
	// closeGrace is how long a connection that sent its last frame waits
	// for the client to close before it closes itself.
	closeGrace = time.Second
	// drainPingTimeout bounds the wait for the ping that follows the first
	// GOAWAY of a graceful close.
	drainPingTimeout = time.Second
)

const clientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// drainPing is the payload of the ping a graceful close sends after its
// first GOAWAY; keepalivePing that of a keepalive ping.
var (
	drainPing     = [8]byte{'d', 'r', 'a', 'i', 'n', 'i', 'n', 'g'}
	keepalivePing = [8]byte{'k', 'e', 'e', 'p', 'a', 'l', 'i', 'v'}
)

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
	hdrID       uint32  // the stream the block is for
	hdrEnd      bool    // its HEADERS carried END_STREAM
	hdrTrailers bool    // the block ends a stream already open
	blk         block
	batchAt     time.Time // when the batch being read arrived
	recvWin     int64     // the connection's receive window left
	recvUnacked uint32
	junk        budget
	scratch     []byte // inline answers are encoded here

	activity atomic.Bool // a frame was read since the keepalive timer last looked

	mu           sync.Mutex
	cond         sync.Cond // on mu: a send window grew, an inbox filled, or the connection closed
	streams      map[uint32]*stream
	lastStream   uint32 // the highest stream opened
	wbuf, wspare []byte
	flushing     bool
	// unaries counts the unary handlers running on goroutines of their
	// own (endOfRequest), unariesEnded those that ended: one that ends
	// while others run yields before it writes, so that answers ready
	// together go out together.
	unaries      int
	unariesEnded uint64
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
	// slots counts the calls holding one of MaxConcurrentStreams: open
	// streams, and reset ones whose handler still runs.
	slots         int
	windowCredit  int   // WINDOW_UPDATEs the DATA sent has earned (two a frame, at most junkBurst)
	buffered      int64 // request bytes held (maxConnBuffered)
	resets        budget
	lastPingAt    time.Time
	pingStrikes   int
	sentSincePing bool      // headers or data sent since the client's last ping
	idleSince     time.Time // when slots last fell to 0 (MaxConnectionIdle)
	pingOut       bool      // a keepalive ping awaits its answer
	writeDeadline time.Time // the one set on nc, refreshed as writes go

	ageTimer, graceTimer, idleTimer, kaTimer, drainTimer *time.Timer

	closeWhenFlushed, writeClosed bool
}

func newConn(s *Server, nc net.Conn) *conn {
	c := &conn{
		s:            s,
		nc:           nc,
		br:           bufio.NewReaderSize(nc, readBufferSize),
		streams:      map[uint32]*stream{},
		sendWin:      defaultWindow,
		recvWin:      connRecvWindow,
		peerInitWin:  defaultWindow,
		peerMaxFrame: 16384,
		wbuf:         make([]byte, 0, 16<<10),
		wspare:       make([]byte, 0, 16<<10),
	}
	c.cond.L = &c.mu
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.hdec = hpack.NewDecoder(4096, c.onField)
	c.hdec.SetMaxStringLength(maxHeaderListSize)
	c.idleSince = time.Now()
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
	c.startTimersLocked()
	c.mu.Unlock()
	c.flush()

	fresh, frames := true, 0
	for {
		f, err := c.readFrame()
		if err == nil {
			if fresh {
				// One clock reading a batch (the frames of a batch arrived
				// together), and one sign of life for the keepalive.
				c.batchAt, fresh = time.Now(), false
				c.activity.Store(true)
			}
			frames++
			err = c.onFrame(f)
		}
		if err != nil {
			c.readError(err)
			return
		}
		if c.br.Buffered() == c.frame.consumed {
			c.flushBatch() // nothing more to read without waiting
			if frames >= busyBatch {
				// A connection that always has more to read would keep its
				// core until the scheduler preempts it (10 ms): let the
				// other connections' readers have their turn first.
				runtime.Gosched()
			}
			fresh, frames = true, 0
		}
	}
}

// flushBatch writes what the batch just read queued. When another
// goroutine is writing and the queue is past maxWriteQueue, the reader
// waits for it: a client that does not read its answers stops being read.
func (c *conn) flushBatch() {
	c.flush()
	c.mu.Lock()
	for len(c.wbuf) > maxWriteQueue && c.werr == nil && c.flushing {
		c.cond.Wait()
	}
	c.mu.Unlock()
	c.flush()
}

// readError ends the connection after a read failure: a protocol error is
// answered with GOAWAY.
func (c *conn) readError(err error) {
	var ce http2.ConnectionError
	var calm calmError
	code, debug := http2.ErrCode(0), ""
	switch {
	case errors.As(err, &ce):
		code = http2.ErrCode(ce)
	case errors.As(err, &calm):
		code, debug = calm.code, calm.debug
		c.s.log.WithField("remote", c.nc.RemoteAddr().String()).WithField("reason", debug).Warn("grpc: connection closed: the client passed a bound")
	default:
		return // the client left, or the connection was closed
	}
	c.mu.Lock()
	c.writeGoAwayLocked(c.lastStream, code, debug)
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
		} else if len(f.payload) == 0 {
			if err := c.spendJunk(); err != nil {
				return err
			}
		}
		return c.onHeaderBlock(f.payload, end)
	case frameData:
		return c.onData(f)
	case frameSettings:
		return c.onSettings(f)
	case frameWindowUpdate:
		return c.onWindowUpdate(f)
	case framePing:
		return c.onPing(f)
	case frameRSTStream:
		return c.onReset(f)
	case framePrio:
		if u32(f.payload)&(1<<31-1) == f.id {
			return c.streamError(f.id, http2.ErrCodeProtocol) // §5.3.1: on itself
		}
		return c.spendJunk()
	}
	// GOAWAY (the client leaves: its calls end on their own) and unknown
	// frames need nothing.
	return nil
}

// streamError resets stream id with code (RFC 9113 §5.4.2) and ends it;
// the reset counts against the connection's budget.
func (c *conn) streamError(id uint32, code http2.ErrCode) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writeRSTLocked(id, code)
	if st := c.streams[id]; st != nil {
		st.reset = true
		c.endStreamLocked(st)
	}
	return c.spendResetLocked()
}

func (c *conn) onSettings(f *frame) error {
	if f.flags&flagAck != 0 {
		return nil
	}
	if err := c.spendJunk(); err != nil {
		return err
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
				if st.sendWin > maxWindow {
					return http2.ConnectionError(http2.ErrCodeFlowControl) // §6.9.2
				}
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

// onWindowUpdate grows a send window (RFC 9113 §6.9): an increment of 0
// is a PROTOCOL_ERROR, a window past 2^31-1 a FLOW_CONTROL_ERROR, of the
// stream or of the connection.
func (c *conn) onWindowUpdate(f *frame) error {
	inc := int64(u32(f.payload) & (1<<31 - 1))
	c.mu.Lock()
	if c.windowCredit > 0 {
		c.windowCredit-- // one of the two a DATA frame sent may earn
	} else if err := c.spendJunk(); err != nil {
		c.mu.Unlock()
		return err
	}
	if f.id == 0 {
		defer c.mu.Unlock()
		if inc == 0 {
			return http2.ConnectionError(http2.ErrCodeProtocol)
		}
		if c.sendWin+inc > maxWindow {
			return http2.ConnectionError(http2.ErrCodeFlowControl)
		}
		c.sendWin += inc
		c.unblockLocked()
		return nil
	}
	if f.id > c.lastStream {
		c.mu.Unlock()
		return http2.ConnectionError(http2.ErrCodeProtocol) // §5.1: idle
	}
	st := c.streams[f.id]
	switch {
	case st == nil:
		c.mu.Unlock()
		return nil
	case inc == 0:
		c.mu.Unlock()
		return c.streamError(f.id, http2.ErrCodeProtocol)
	case st.sendWin+inc > maxWindow:
		c.mu.Unlock()
		return c.streamError(f.id, http2.ErrCodeFlowControl)
	}
	st.sendWin += inc
	c.unblockLocked()
	c.mu.Unlock()
	return nil
}

// onPing answers a client's ping, within the ping policy, and takes the
// answers to this side's pings.
func (c *conn) onPing(f *frame) error {
	if f.flags&flagAck != 0 {
		switch string(f.payload) {
		case string(drainPing[:]):
			c.finishDrain()
		case string(keepalivePing[:]):
			c.mu.Lock()
			c.pingOut = false
			c.mu.Unlock()
		}
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.checkPingLocked(time.Now()); err != nil {
		return err
	}
	c.writeFrameLocked(framePing, flagAck, 0, f.payload)
	return nil
}

// onReset ends a call the client cancelled. Its slot stays held until its
// handler returns; resets beyond the budget end the connection.
func (c *conn) onReset(f *frame) error {
	c.mu.Lock()
	if f.id > c.lastStream {
		c.mu.Unlock()
		return http2.ConnectionError(http2.ErrCodeProtocol) // §6.4: idle
	}
	st := c.streams[f.id]
	if st == nil {
		c.mu.Unlock()
		return c.spendJunk()
	}
	defer c.mu.Unlock()
	st.reset = true
	c.endStreamLocked(st)
	if c.batchAt.Sub(st.opened) >= rapidResetAge {
		return nil // a cancellation (Envoy's timeout): it could as well have let the call end
	}
	return c.spendResetLocked()
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
		c.writeTrailersLocked(st, okStatus, st.trailer) // only an answer waits for window
		c.endStreamLocked(st)
	}
	clear(c.blocked[n:])
	c.blocked = c.blocked[:n]
	c.cond.Broadcast()
}

// startTimersLocked arms the connection's timers: its age, its idle time
// and its keepalive. A timer's function runs on a goroutine of the
// runtime's for a moment; shutdown stops them all.
func (c *conn) startTimersLocked() {
	ka := c.s.o.Keepalive
	if age := ka.MaxConnectionAge; age > 0 {
		jitter := time.Duration(rand.Int64N(int64(age)/5+1)) - age/10
		c.ageTimer = time.AfterFunc(age+jitter, c.onAge)
	}
	if ka.MaxConnectionIdle > 0 {
		c.idleTimer = time.AfterFunc(ka.MaxConnectionIdle, c.checkIdle)
	}
	c.kaTimer = time.AfterFunc(ka.Time, c.checkKeepalive)
}

// onAge drains a connection that reached MaxConnectionAge, and closes it
// MaxConnectionAgeGrace later. The grace is armed before the drain writes:
// a client that does not read cannot hold the connection past it.
func (c *conn) onAge() {
	if g := c.s.o.Keepalive.MaxConnectionAgeGrace; g > 0 {
		c.mu.Lock()
		if !c.closed {
			c.graceTimer = time.AfterFunc(g, c.kill)
		}
		c.mu.Unlock()
	}
	c.drain()
}

// checkIdle drains a connection that has held no call for
// MaxConnectionIdle, as grpc-go does, and looks again later otherwise.
func (c *conn) checkIdle() {
	idle := c.s.o.Keepalive.MaxConnectionIdle
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	next := idle
	if c.slots == 0 {
		since := time.Since(c.idleSince)
		if since >= idle {
			c.mu.Unlock()
			c.drain()
			return
		}
		next = idle - since
	}
	c.idleTimer.Reset(next)
	c.mu.Unlock()
}

// checkKeepalive pings a connection that has read nothing for
// Keepalive.Time, and closes it when nothing has come Keepalive.Timeout
// after the ping.
func (c *conn) checkKeepalive() {
	ka := c.s.o.Keepalive
	active := c.activity.Swap(false)
	c.mu.Lock()
	switch {
	case c.closed:
		c.mu.Unlock()
		return
	case active:
		c.pingOut = false
		c.kaTimer.Reset(ka.Time)
		c.mu.Unlock()
		return
	case c.pingOut:
		c.mu.Unlock()
		c.kill() // nothing since the ping: the client is gone
		return
	}
	c.pingOut = true
	c.writeFrameLocked(framePing, 0, 0, keepalivePing[:])
	c.kaTimer.Reset(ka.Timeout)
	c.mu.Unlock()
	c.flush()
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
	c.writeGoAwayLocked(1<<31-1, http2.ErrCodeNo, "")
	c.writeFrameLocked(framePing, 0, 0, drainPing[:])
	c.drainTimer = time.AfterFunc(drainPingTimeout, c.finishDrain)
	c.mu.Unlock()
	c.flush()
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
	c.writeGoAwayLocked(c.lastStream, http2.ErrCodeNo, "")
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
	for _, t := range []*time.Timer{c.ageTimer, c.graceTimer, c.idleTimer, c.kaTimer, c.drainTimer} {
		if t != nil {
			t.Stop()
		}
	}
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
