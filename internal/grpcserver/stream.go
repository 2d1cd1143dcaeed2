package grpcserver

import (
	"context"
	"encoding/base64"
	"fmt"
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
	post        bool
	contentType string
	timeout     time.Duration
	hasTimeout  bool
	encoding    string
	md          metadata.MD
	tooLarge    bool

	// Request bytes (gRPC length-prefixed messages) not yet taken; the
	// reader's.
	msg     []byte
	endRecv bool

	// Under c.mu.
	sendWin    int64
	headerSent bool
	pending    []byte // answer bytes waiting for window
	done       bool   // ended: answered, reset or the connection closed
	reset      bool
	cancel     context.CancelFunc
	inbox      [][]byte // messages of a streaming call, not yet received
	inboxBytes int

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
	}
	c.hdr, c.hdrEnd, c.hdrTrailers, c.hdrSize = nil, endStream, false, 0
	c.mu.Lock()
	if id <= c.lastStream {
		st := c.streams[id]
		c.mu.Unlock()
		if st == nil || st.endRecv || !endStream {
			return http2.ConnectionError(http2.ErrCodeStreamClosed)
		}
		c.hdrTrailers = true
		c.hdr = st
		return c.onHeaderBlock(f.payload, ended)
	}
	c.lastStream = id
	refuse := c.draining == 2 || len(c.streams) >= int(c.s.o.MaxConcurrentStreams)
	if refuse {
		c.writeRSTLocked(id, http2.ErrCodeRefusedStream)
		c.mu.Unlock()
		return c.onHeaderBlock(f.payload, ended)
	}
	st := streamPool.Get().(*stream)
	st.c, st.id, st.sendWin = c, id, c.peerInitWin
	c.streams[id] = st
	c.mu.Unlock()
	c.hdr = st
	return c.onHeaderBlock(f.payload, ended)
}

// onHeaderBlock decodes one fragment of a header block, and acts on the
// block when it ends.
func (c *conn) onHeaderBlock(frag []byte, end bool) error {
	if _, err := c.hdec.Write(frag); err != nil {
		return http2.ConnectionError(http2.ErrCodeCompression)
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
	case st == nil:
	case c.hdrTrailers:
		c.endOfRequest(st, nil)
	default:
		c.startCall(st, c.hdrEnd)
	}
	return nil
}

// onField takes one decoded header field of the block being read.
func (c *conn) onField(f hpack.HeaderField) {
	st := c.hdr
	if st == nil || c.hdrTrailers {
		return
	}
	c.hdrSize += len(f.Name) + len(f.Value) + 32
	if c.hdrSize > maxHeaderListSize {
		st.tooLarge = true
		return
	}
	switch f.Name {
	case ":path":
		st.path = f.Value
		st.m = c.s.methods[f.Value]
		return
	case ":method":
		st.post = f.Value == "POST"
		return
	case ":scheme":
		return
	case "content-type":
		st.contentType = f.Value
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
	case !st.post || st.path == "":
		c.mu.Lock()
		c.writeRSTLocked(st.id, http2.ErrCodeProtocol)
		c.endStreamLocked(st)
		c.mu.Unlock()
		return
	case !isGRPCContentType(st.contentType):
		c.mu.Lock()
		c.field(":status", "415")
		c.field("content-type", "text/plain")
		c.field("grpc-status", statusCodes[codes.Internal])
		c.field("grpc-message", encodeGRPCMessage(fmt.Sprintf("invalid gRPC request content-type %q", st.contentType)))
		c.writeHeaderBlockLocked(st.id, true)
		c.endStreamLocked(st)
		c.mu.Unlock()
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
	c.recvUnacked += n
	c.mu.Lock()
	if c.recvUnacked >= connRecvWindow/4 {
		c.writeWindowUpdateLocked(0, c.recvUnacked)
		c.recvUnacked = 0
	}
	st := c.streams[f.id]
	last := c.lastStream
	c.mu.Unlock()
	if st == nil {
		if f.id > last {
			return http2.ConnectionError(http2.ErrCodeProtocol)
		}
		return nil // a call already answered or reset
	}
	if st.endRecv {
		c.mu.Lock()
		c.writeRSTLocked(st.id, http2.ErrCodeStreamClosed)
		st.reset = true
		c.endStreamLocked(st)
		c.mu.Unlock()
		return nil
	}
	data := f.payload
	end := f.flags&flagEndStream != 0
	if !end && n > 0 {
		c.mu.Lock()
		c.writeWindowUpdateLocked(st.id, n) // the call's bytes are bounded by MaxRecvMsgSize instead
		c.mu.Unlock()
	}
	if end && len(st.msg) == 0 && st.m != nil && st.m.unary != nil {
		// The whole request in one frame, the common case: no copy.
		c.endOfRequest(st, data)
		return nil
	}
	st.msg = append(st.msg, data...)
	stat := c.checkPrefix(st.msg)
	if stat == nil && len(st.msg) > c.s.o.MaxRecvMsgSize+5 && st.m != nil && st.m.unary != nil {
		stat = status.New(codes.Unimplemented, "grpc: a unary call received more than one request message")
	}
	if stat != nil {
		if end {
			c.mu.Lock()
			st.endRecv = true
			c.mu.Unlock()
		}
		c.fail(st, stat)
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
		c.runUnary(st, msg, &c.scratch)
		return
	}
	msg = append([]byte(nil), msg...)
	go func() {
		buf := answerPool.Get().(*[]byte)
		c.runUnary(st, msg, buf)
		answerPool.Put(buf)
		c.flush()
	}()
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

// runUnary calls st's handler on msg and answers, encoding into *buf.
func (c *conn) runUnary(st *stream, msg []byte, buf *[]byte) {
	ctx := c.ctx
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
	if !c.s.o.Inline {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		c.mu.Lock()
		st.cancel = cancel
		c.mu.Unlock()
	}
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
		c.writeTrailersLocked(st, stat, nil)
		c.endStreamLocked(st)
		return
	}
	c.writeResponseHeadersLocked(st, nil)
	if rest := c.sendDataLocked(st, msg); len(rest) > 0 {
		st.pending = append(st.pending[:0], rest...)
		c.blocked = append(c.blocked, st)
		return
	}
	c.writeTrailersLocked(st, okStatus, nil)
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
	if st.ss == nil && st.m != nil && st.m.unary != nil && c.s.o.Inline && st.pending == nil {
		c.recycle(st)
	}
	c.cond.Broadcast()
}

// recycle returns an inline call's stream object to the pool: nothing else
// holds it once it has ended.
func (c *conn) recycle(st *stream) {
	dec := st.dec
	msg := st.msg[:0]
	*st = stream{dec: dec, msg: msg}
	streamPool.Put(st)
}
