package grpcserver

import (
	"context"
	"encoding/base64"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// stream is one call.
type stream struct {
	c  *conn
	id uint32
	m  *method

	// The request's headers, as the reader decodes them.
	path        string
	method      string
	post        bool
	contentType string
	timeout     time.Duration
	hasTimeout  bool
	encoding    string
	md          metadata.MD
	tooLarge    bool
	opened      time.Time // the batch its HEADERS came in
	contentLen  int64     // -1: no content-length
	received    int64     // DATA payload bytes, to check content-length

	// Request bytes (gRPC length-prefixed messages) not yet taken; the
	// reader's.
	msg     []byte
	endRecv bool

	recvWin     int64 // the receive window this side granted, left
	recvUnacked uint32

	// Under c.mu.
	held       int64 // bytes counted in c.buffered for this stream
	sendWin    int64
	headerSent bool
	pending    []byte // answer bytes waiting for window
	done       bool   // ended: answered, reset or the connection closed
	reset      bool
	cancel     context.CancelFunc
	inbox      [][]byte // messages of a streaming call, not yet received
	inboxBytes int
	running    bool // its handler's goroutine has not returned
	slot       bool // it holds one of MaxConcurrentStreams
	header     metadata.MD
	trailer    metadata.MD

	call callCtx // the context a unary handler sees

	deadline deadlineCtx     // an inline call's context, when it has a deadline
	req      []byte          // the request message, while a unary handler runs
	dec      func(any) error // decodes req; bound once per stream object
	ss       *serverStream   // a streaming call's
}

var streamPool = sync.Pool{New: func() any {
	st := &stream{}
	st.dec = st.decode
	return st
}}

func (st *stream) decode(v any) error {
	if err := st.c.s.unmarshal(st.req, v); err != nil {
		return status.Errorf(codes.Internal, "grpc: error unmarshalling request: %v", err)
	}
	return nil
}

// onHeaders starts reading a header block: a new call, or the trailers of
// one (which end its request).
func (c *conn) onHeaders(f *frame) error {
	id, ended, endStream := f.id, f.flags&flagEndHeaders != 0, f.flags&flagEndStream != 0
	if id%2 == 0 {
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	if !ended {
		c.contID = id
		if len(f.payload) == 0 {
			if err := c.spendJunk(); err != nil {
				return err
			}
		}
	}
	if f.flags&flagPriority != 0 && c.frame.dep == id {
		// §5.3.1: a stream cannot depend on itself. The block is decoded
		// all the same, and its stream reset.
		c.blk = block{rst: http2.ErrCodeProtocol}
	} else {
		c.blk = block{}
	}
	c.hdr, c.hdrID, c.hdrEnd, c.hdrTrailers = nil, id, endStream, false
	c.mu.Lock()
	if id <= c.lastStream {
		st := c.streams[id]
		c.mu.Unlock()
		switch {
		case st == nil:
			// Closed (answered, reset or skipped): Go's server answers a
			// connection error, as §5.1.1 asks of a stream id that does
			// not increase.
			return http2.ConnectionError(http2.ErrCodeStreamClosed)
		case st.endRecv:
			c.blk.rst = http2.ErrCodeStreamClosed // §5.1: half-closed (remote)
		case !endStream:
			c.blk.rst = http2.ErrCodeProtocol // §8.1: trailers end the stream
		default:
			c.hdrTrailers = true
			c.hdr = st
		}
		return c.onHeaderBlock(f.payload, ended)
	}
	c.lastStream = id
	refuse := c.draining == 2 || c.slots >= int(c.s.o.MaxConcurrentStreams)
	if refuse {
		c.writeRSTLocked(id, http2.ErrCodeRefusedStream)
		var err error
		if c.draining != 2 {
			// Past the limit (a stream error, §5.1.2: a client may race
			// it before it has our SETTINGS, a few times), or within it
			// while the slots are held by calls the client reset and
			// whose handlers still run: either counts.
			err = c.spendResetLocked()
		}
		c.mu.Unlock()
		if err != nil {
			return err
		}
		return c.onHeaderBlock(f.payload, ended)
	}
	st := streamPool.Get().(*stream)
	st.c, st.id, st.sendWin, st.slot = c, id, c.peerInitWin, true
	st.recvWin, st.contentLen, st.opened = streamRecvWindow, -1, c.batchAt
	c.slots++
	c.streams[id] = st
	c.mu.Unlock()
	c.hdr = st
	return c.onHeaderBlock(f.payload, ended)
}

// onHeaderBlock decodes one fragment of a header block, and acts on the
// block when it ends. Every block counts against maxHeaderBlock, whatever
// stream it is for.
func (c *conn) onHeaderBlock(frag []byte, end bool) error {
	c.blk.raw += len(frag)
	if c.blk.raw > maxHeaderBlock {
		return errHeaderFlood
	}
	if _, err := c.hdec.Write(frag); err != nil {
		return http2.ConnectionError(http2.ErrCodeCompression)
	}
	if c.blk.decoded > maxHeaderBlock {
		return errHeaderFlood
	}
	if !end {
		return nil
	}
	if err := c.hdec.Close(); err != nil {
		return http2.ConnectionError(http2.ErrCodeCompression)
	}
	st := c.hdr
	c.hdr = nil
	switch {
	case c.blk.rst != 0:
		return c.streamError(c.hdrID, c.blk.rst)
	case st == nil:
	case c.blk.malformed || !c.hdrTrailers && !c.blk.complete():
		return c.streamError(st.id, http2.ErrCodeProtocol)
	case c.hdrTrailers:
		if st.contentLen >= 0 && st.received != st.contentLen {
			return c.streamError(st.id, http2.ErrCodeProtocol) // §8.1.1
		}
		c.endOfRequest(st, nil)
	default:
		c.startCall(st, c.hdrEnd)
	}
	return nil
}

// onField takes one decoded header field of the block being read.
func (c *conn) onField(f hpack.HeaderField) {
	c.blk.decoded += len(f.Name) + len(f.Value) + 32
	st := c.hdr
	if st == nil {
		return
	}
	c.blk.checkField(f.Name, f.Value, c.hdrTrailers)
	if c.hdrTrailers {
		return
	}
	if c.blk.decoded > maxHeaderListSize {
		st.tooLarge = true
		return
	}
	switch f.Name {
	case ":path":
		st.path = f.Value
		st.m = c.s.methods[f.Value]
		return
	case ":method":
		st.method = f.Value
		st.post = f.Value == "POST"
		return
	case ":scheme", ":authority":
		return
	case "content-type":
		st.contentType = f.Value
	case "content-length":
		n, err := strconv.ParseInt(f.Value, 10, 64)
		if err != nil || n < 0 || st.contentLen >= 0 {
			c.blk.malformed = true
		}
		st.contentLen = n
		return
	case "grpc-timeout":
		st.timeout, st.hasTimeout = parseTimeout(f.Value)
		return
	case "grpc-encoding":
		st.encoding = f.Value
		return
	case "te", "grpc-accept-encoding", "grpc-message-type", "grpc-message", "grpc-status", "grpc-status-details-bin":
		return
	}
	// Metadata, for interceptors and streaming handlers: what grpc-go's
	// server puts in the incoming metadata.
	if st.m == nil || (st.m.unary != nil && !c.s.o.UnaryMetadata) {
		return
	}
	v := f.Value
	if strings.HasSuffix(f.Name, "-bin") {
		b, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(v, "="))
		if err != nil {
			return
		}
		v = string(b)
	}
	if st.md == nil {
		st.md = metadata.MD{}
	}
	st.md[f.Name] = append(st.md[f.Name], v)
}

// startCall acts on a new call's headers.
func (c *conn) startCall(st *stream, endStream bool) {
	st.endRecv = endStream
	switch {
	case !st.post:
		// As grpc-go answers it: 405, and the request's rest refused.
		c.abort(st, "405", "application/grpc", fmt.Sprintf("Received a HEADERS frame with :method %q which should be POST", st.method))
		return
	case !isGRPCContentType(st.contentType):
		c.abort(st, "415", "text/plain", fmt.Sprintf("invalid gRPC request content-type %q", st.contentType))
		return
	case st.tooLarge:
		c.fail(st, status.New(codes.Internal, "grpc: header list too large"))
		return
	case st.m == nil:
		c.fail(st, c.s.unknownMethod(st.path))
		return
	case st.m.stream != nil:
		c.startStreaming(st)
		return
	}
	if endStream {
		c.endOfRequest(st, nil)
	}
}

func isGRPCContentType(ct string) bool {
	rest, ok := strings.CutPrefix(ct, "application/grpc")
	return ok && (rest == "" || rest[0] == '+' || rest[0] == ';')
}

// abort answers a request that is not a gRPC call with an HTTP status and
// grpc-status INTERNAL (Trailers-Only), and resets the stream when the
// client has more to send: grpc-go's early abort.
func (c *conn) abort(st *stream, httpStatus, contentType, msg string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.field(":status", httpStatus)
	c.field("content-type", contentType)
	c.field("grpc-status", statusCodes[codes.Internal])
	c.field("grpc-message", encodeGRPCMessage(msg))
	c.writeHeaderBlockLocked(st.id, true)
	if !st.endRecv {
		c.writeRSTLocked(st.id, http2.ErrCodeNo)
	}
	c.endStreamLocked(st)
}

// unknownMethod is grpc-go's answer to a call of no registered method.
func (s *Server) unknownMethod(path string) *status.Status {
	name := strings.TrimPrefix(path, "/")
	i := strings.LastIndex(name, "/")
	if i < 0 {
		return status.Newf(codes.Unimplemented, "malformed method name: %q", path)
	}
	if _, ok := s.info[name[:i]]; ok {
		return status.Newf(codes.Unimplemented, "unknown method %v for service %v", name[i+1:], name[:i])
	}
	return status.Newf(codes.Unimplemented, "unknown service %v", name[:i])
}

// fail answers st with stat before its request has ended; the rest of the
// request is dropped.
func (c *conn) fail(st *stream, stat *status.Status) {
	c.mu.Lock()
	if !st.done {
		c.writeTrailersLocked(st, stat, nil)
		if !st.endRecv {
			c.writeRSTLocked(st.id, http2.ErrCodeNo)
		}
		c.endStreamLocked(st)
	}
	c.mu.Unlock()
}

// onData takes a DATA frame: flow control, then the call's bytes.
func (c *conn) onData(f *frame) error {
	n := f.length
	if int64(n) > c.recvWin {
		return http2.ConnectionError(http2.ErrCodeFlowControl) // §6.9.1
	}
	c.recvWin -= int64(n)
	c.recvUnacked += n
	end := f.flags&flagEndStream != 0
	if n == 0 && !end {
		if err := c.spendJunk(); err != nil {
			return err
		}
	}
	c.mu.Lock()
	if c.recvUnacked >= connRecvWindow/4 {
		c.writeWindowUpdateLocked(0, c.recvUnacked)
		c.recvWin += int64(c.recvUnacked)
		c.recvUnacked = 0
	}
	st := c.streams[f.id]
	last := c.lastStream
	c.mu.Unlock()
	if st == nil {
		if f.id > last {
			return http2.ConnectionError(http2.ErrCodeProtocol)
		}
		// A call already answered or reset: as Go's server does, tell the
		// client to stop sending (RFC 9113 §5.1, closed). No handler is
		// involved, so it counts as a frame that carries no call.
		c.mu.Lock()
		c.writeRSTLocked(f.id, http2.ErrCodeStreamClosed)
		c.mu.Unlock()
		return c.spendJunk()
	}
	if st.endRecv {
		return c.streamError(st.id, http2.ErrCodeStreamClosed)
	}
	if int64(n) > st.recvWin {
		return c.streamError(st.id, http2.ErrCodeFlowControl)
	}
	st.recvWin -= int64(n)
	data := f.payload
	st.received += int64(len(data))
	if end && st.contentLen >= 0 && st.received != st.contentLen || st.contentLen >= 0 && st.received > st.contentLen {
		return c.streamError(st.id, http2.ErrCodeProtocol) // §8.1.1
	}
	if !end && n > 0 {
		// The call's bytes are bounded by MaxRecvMsgSize and the
		// connection's by maxConnBuffered: the window is granted again as
		// they arrive.
		if st.recvUnacked += n; st.recvUnacked >= streamRecvWindow/4 {
			c.mu.Lock()
			c.writeWindowUpdateLocked(st.id, st.recvUnacked)
			c.mu.Unlock()
			st.recvWin += int64(st.recvUnacked)
			st.recvUnacked = 0
		}
	}
	if end && len(st.msg) == 0 && st.m != nil && st.m.unary != nil {
		// The whole request in one frame, the common case: no copy.
		c.endOfRequest(st, data)
		return nil
	}
	c.mu.Lock()
	full := c.buffered+int64(len(data)) > maxConnBuffered
	if !full {
		c.holdLocked(st, int64(len(data)))
	}
	c.mu.Unlock()
	if full {
		c.failData(st, end, status.New(codes.ResourceExhausted, "grpc: the connection holds too many request bytes"))
		return nil
	}
	st.msg = append(st.msg, data...)
	stat := c.checkPrefix(st.msg)
	if stat == nil && len(st.msg) > c.s.o.MaxRecvMsgSize+5 && st.m != nil && st.m.unary != nil {
		stat = status.New(codes.Unimplemented, "grpc: a unary call received more than one request message")
	}
	if stat != nil {
		c.failData(st, end, stat)
		return nil
	}
	if st.m != nil && st.m.stream != nil {
		c.deliver(st)
	}
	if end {
		c.endOfRequest(st, nil)
	}
	return nil
}

// failData fails a call on its request's bytes.
func (c *conn) failData(st *stream, end bool, stat *status.Status) {
	if end {
		c.mu.Lock()
		st.endRecv = true
		c.mu.Unlock()
	}
	c.fail(st, stat)
}

// holdLocked counts n request bytes (negative: released) as held for st.
func (c *conn) holdLocked(st *stream, n int64) {
	st.held += n
	c.buffered += n
}

// msgLen is the length in the 5-byte prefix of the gRPC message that b
// starts with (a compressed-flag byte, then a big-endian length).
func msgLen(b []byte) int { return int(u32(b[1:5])) }

// checkPrefix checks the length prefix of the first message in b, as soon
// as it is there.
func (c *conn) checkPrefix(b []byte) *status.Status {
	if len(b) < 5 {
		return nil
	}
	if n := msgLen(b); n > c.s.o.MaxRecvMsgSize {
		return status.Newf(codes.ResourceExhausted, "grpc: received message larger than max (%d vs. %d)", n, c.s.o.MaxRecvMsgSize)
	}
	return nil
}

// endOfRequest runs when a call's request has ended: a unary call is
// decided (data, when set, is the whole request, valid until the next
// frame), a streaming call's handler sees io.EOF.
func (c *conn) endOfRequest(st *stream, data []byte) {
	if st.m.stream != nil {
		c.mu.Lock()
		st.endRecv = true // read by the handler's goroutine
		c.cond.Broadcast()
		c.mu.Unlock()
		return
	}
	st.endRecv = true
	if data == nil {
		data = st.msg
	}
	msg, stat := c.unframe(st, data)
	if stat != nil {
		c.fail(st, stat)
		return
	}
	if c.s.o.Inline {
		c.runUnary(st, c.ctx, msg, &c.scratch)
		return
	}
	// A handler that waits runs on a goroutine of its own, owned by the
	// server, holding its slot until it returns; its context exists
	// before it starts, so that a reset cancels it.
	msg = append([]byte(nil), msg...)
	ctx, cancel := context.WithCancel(c.ctx)
	c.mu.Lock()
	if st.done {
		c.mu.Unlock()
		cancel()
		return
	}
	st.cancel, st.running = cancel, true
	c.unaries++
	c.holdLocked(st, int64(len(msg)))
	c.mu.Unlock()
	c.s.handlers.Add(1)
	go func() {
		defer c.s.handlers.Done()
		buf := answerPool.Get().(*[]byte)
		c.runUnary(st, ctx, msg, buf)
		answerPool.Put(buf)
		// While others run, the answers of calls decided together (a
		// store's batch) are queued as their handlers end: this one yields
		// while others end during its yields, and the first to flush
		// then writes them all in one write, where each would have
		// written its own.
		ended, others := c.unaryDone(st)
		for i := 0; others && i < maxJoinYields; i++ {
			runtime.Gosched()
			ended, others = c.othersEnded(ended)
		}
		c.flush()
	}()
}

// maxJoinYields bounds the yields of one ending handler (unaryDone).
const maxJoinYields = 16

// unaryDone frees the slot and the bytes of a unary call of endOfRequest
// whose handler has returned. It returns the count of such handlers ended
// so far, and whether others still run with no write under way.
func (c *conn) unaryDone(st *stream) (ended uint64, others bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st.running = false
	c.releaseLocked(st)
	c.unaries--
	c.unariesEnded++
	return c.unariesEnded, c.unaries > 0 && !c.flushing
}

// othersEnded reports whether unary handlers ended since the count ended
// and others still run with no write under way, and the count now.
func (c *conn) othersEnded(ended uint64) (uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.unariesEnded, c.unariesEnded != ended && c.unaries > 0 && !c.flushing
}

var answerPool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// unframe returns the one message of a unary request.
func (c *conn) unframe(st *stream, b []byte) ([]byte, *status.Status) {
	if len(b) < 5 {
		return nil, status.New(codes.Internal, "grpc: the request held no message")
	}
	n := msgLen(b)
	if n > c.s.o.MaxRecvMsgSize {
		return nil, status.Newf(codes.ResourceExhausted, "grpc: received message larger than max (%d vs. %d)", n, c.s.o.MaxRecvMsgSize)
	}
	if b[0] != 0 {
		if st.encoding == "" || st.encoding == "identity" {
			return nil, status.New(codes.Internal, "grpc: compressed flag set with identity or empty encoding")
		}
		return nil, status.Newf(codes.Unimplemented, "grpc: Decompressor is not installed for grpc-encoding %q", st.encoding)
	}
	if len(b)-5 != n {
		if len(b)-5 < n {
			return nil, status.New(codes.Internal, "grpc: the request ended inside its message")
		}
		return nil, status.New(codes.Unimplemented, "grpc: a unary call received more than one request message")
	}
	return b[5:], nil
}

// runUnary calls st's handler on msg and answers, encoding into *buf; ctx
// is the connection's, or the call's own when it runs on a goroutine.
func (c *conn) runUnary(st *stream, ctx context.Context, msg []byte, buf *[]byte) {
	var dctx *deadlineCtx
	if st.hasTimeout {
		if c.s.o.Inline {
			// The stream object is the call's, and is recycled only
			// once the call has ended: its context needs no allocation.
			dctx = &st.deadline
			dctx.reset(ctx, st.timeout)
		} else {
			dctx = newDeadlineCtx(ctx, st.timeout)
		}
		ctx = dctx
	}
	// An inline call's context lives in its stream object, recycled once
	// the call has ended (an inline handler starts nothing that outlives
	// it). A call on a goroutine may leave contexts derived from its own
	// behind it (context.WithTimeout follows a parent of another type on
	// a goroutine): its context is its own, never changed once made.
	cc := &st.call
	if !c.s.o.Inline {
		cc = new(callCtx)
	}
	cc.Context, cc.st = ctx, st
	ctx = cc
	if st.md != nil {
		ctx = metadata.NewIncomingContext(ctx, st.md)
	}
	st.req = msg
	resp, err := st.m.unary(st.m.impl, ctx, st.dec, c.s.o.UnaryInterceptor)
	st.req = nil
	if dctx != nil {
		dctx.release()
	}
	var stat *status.Status
	b := (*buf)[:0]
	if err == nil {
		b = append(b, 0, 0, 0, 0, 0)
		if b, err = c.s.marshalAppend(b, resp); err != nil {
			err = status.Errorf(codes.Internal, "grpc: error while marshaling: %v", err)
		}
	}
	if err != nil {
		stat, b = errStatus(err), nil
	} else {
		n := len(b) - 5
		b[1], b[2], b[3], b[4] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
		*buf = b
	}
	c.mu.Lock()
	c.answerLocked(st, b, stat)
	c.mu.Unlock()
}

// answerLocked sends a unary call's answer: headers, the message (or what
// the windows allow of it; the rest waits in st.pending) and trailers;
// Trailers-Only when msg is nil.
func (c *conn) answerLocked(st *stream, msg []byte, stat *status.Status) {
	if st.cancel != nil {
		st.cancel()
	}
	if st.done {
		return
	}
	if msg == nil {
		if !st.headerSent && st.header != nil {
			c.writeResponseHeadersLocked(st, st.header) // as grpc-go: headers set, then the error
		}
		c.writeTrailersLocked(st, stat, st.trailer)
		c.endStreamLocked(st)
		return
	}
	if !st.headerSent {
		c.writeResponseHeadersLocked(st, st.header)
	}
	if rest := c.sendDataLocked(st, msg); len(rest) > 0 {
		st.pending = append(st.pending[:0], rest...)
		c.blocked = append(c.blocked, st)
		return
	}
	c.writeTrailersLocked(st, okStatus, st.trailer)
	c.endStreamLocked(st)
}

var okStatus = status.New(codes.OK, "")

// endStreamLocked forgets a call that has ended (answered, reset or
// refused), and closes a draining connection whose last call it was.
func (c *conn) endStreamLocked(st *stream) {
	if st.done {
		return
	}
	st.done = true
	if st.cancel != nil {
		st.cancel()
	}
	delete(c.streams, st.id)
	if c.draining == 2 && len(c.streams) == 0 {
		c.closeWhenFlushed = true
	}
	c.releaseLocked(st)
	if st.ss == nil && st.m != nil && st.m.unary != nil && c.s.o.Inline && st.pending == nil {
		c.recycle(st)
	}
	c.cond.Broadcast()
}

// releaseLocked frees st's slot and held bytes once it has ended and its
// handler has returned.
func (c *conn) releaseLocked(st *stream) {
	if !st.done || st.running || !st.slot {
		return
	}
	st.slot = false
	c.slots--
	if st.held != 0 {
		c.holdLocked(st, -st.held)
	}
	if c.slots == 0 && c.s.o.Keepalive.MaxConnectionIdle > 0 {
		c.idleSince = time.Now()
	}
}

// recycle returns an inline call's stream object to the pool: nothing else
// holds it once it has ended.
func (c *conn) recycle(st *stream) {
	dec := st.dec
	msg := st.msg[:0]
	*st = stream{dec: dec, msg: msg}
	streamPool.Put(st)
}
