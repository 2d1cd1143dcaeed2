package grpcserver

import (
	"context"
	"io"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// serverStream is a streaming call's grpc.ServerStream.
type serverStream struct {
	st  *stream
	ctx context.Context
}

var _ grpc.ServerStream = (*serverStream)(nil)

// startStreaming runs a streaming call's handler on a goroutine of its own.
func (c *conn) startStreaming(st *stream) {
	ctx := c.ctx
	var cancel context.CancelFunc
	if st.hasTimeout {
		ctx, cancel = context.WithTimeout(ctx, st.timeout)
	} else {
		ctx, cancel = context.WithCancel(ctx)
	}
	st.call.Context, st.call.st = ctx, st
	ctx = &st.call
	if st.md != nil {
		ctx = metadata.NewIncomingContext(ctx, st.md)
	}
	ss := &serverStream{st: st, ctx: ctx}
	c.mu.Lock()
	st.cancel, st.ss, st.running = cancel, ss, true
	c.mu.Unlock()
	c.s.handlers.Add(1)
	go func() {
		defer c.s.handlers.Done()
		err := st.m.stream(st.m.impl, ss)
		stat := okStatus
		if err != nil {
			stat = errStatus(err)
		}
		c.mu.Lock()
		if !st.done {
			if !st.headerSent && st.header != nil {
				c.writeResponseHeadersLocked(st, st.header)
			}
			c.writeTrailersLocked(st, stat, st.trailer)
			if !st.endRecv {
				c.writeRSTLocked(st.id, http2.ErrCodeNo)
			}
			c.endStreamLocked(st)
		}
		st.running = false
		c.releaseLocked(st)
		c.mu.Unlock()
		cancel()
		c.flush()
	}()
}

// deliver moves the complete messages of a streaming call from its bytes to
// its inbox.
func (c *conn) deliver(st *stream) {
	for len(st.msg) >= 5 {
		n := msgLen(st.msg)
		if len(st.msg) < 5+n {
			return
		}
		if st.msg[0] != 0 {
			c.fail(st, status.Newf(codes.Unimplemented, "grpc: Decompressor is not installed for grpc-encoding %q", st.encoding))
			return
		}
		m := append([]byte(nil), st.msg[5:5+n]...)
		st.msg = st.msg[:copy(st.msg, st.msg[5+n:])]
		c.mu.Lock()
		if st.inboxBytes+n > c.s.o.MaxRecvMsgSize {
			c.mu.Unlock()
			c.fail(st, status.New(codes.ResourceExhausted, "grpc: the handler is not receiving its messages"))
			return
		}
		st.inbox = append(st.inbox, m)
		st.inboxBytes += n
		c.cond.Broadcast()
		c.mu.Unlock()
	}
}

func (ss *serverStream) Context() context.Context { return ss.ctx }

func (ss *serverStream) SetHeader(md metadata.MD) error {
	return (*transportStream)(ss.st).SetHeader(md)
}

func (ss *serverStream) SendHeader(md metadata.MD) error {
	return (*transportStream)(ss.st).SendHeader(md)
}

func (ss *serverStream) SetTrailer(md metadata.MD) {
	_ = (*transportStream)(ss.st).SetTrailer(md)
}

// SendMsg sends one message, waiting for flow-control window as long as
// the call lasts.
func (ss *serverStream) SendMsg(m any) error {
	st, c := ss.st, ss.st.c
	b, err := c.s.marshalAppend([]byte{0, 0, 0, 0, 0}, m)
	if err != nil {
		return status.Errorf(codes.Internal, "grpc: error while marshaling: %v", err)
	}
	n := len(b) - 5
	b[1], b[2], b[3], b[4] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
	c.mu.Lock()
	if !st.headerSent && !st.done {
		c.writeResponseHeadersLocked(st, st.header)
	}
	for len(b) > 0 && !st.done && !c.closed {
		b = c.sendDataLocked(st, b)
		if len(b) > 0 {
			c.mu.Unlock()
			c.flush()
			c.mu.Lock()
			if len(b) > 0 && !st.done && !c.closed && (c.sendWin <= 0 || st.sendWin <= 0) {
				c.cond.Wait()
			}
		}
	}
	done := st.done || c.closed
	c.mu.Unlock()
	c.flush()
	if done && len(b) > 0 {
		return status.FromContextError(context.Canceled).Err()
	}
	return nil
}

// RecvMsg receives the next message; io.EOF once the client has sent its
// last.
func (ss *serverStream) RecvMsg(m any) error {
	st, c := ss.st, ss.st.c
	c.mu.Lock()
	for len(st.inbox) == 0 && !st.endRecv && !st.done && !c.closed {
		c.cond.Wait()
	}
	if len(st.inbox) == 0 {
		end := st.endRecv && !st.reset
		c.mu.Unlock()
		if end {
			return io.EOF
		}
		return status.FromContextError(context.Canceled).Err()
	}
	b := st.inbox[0]
	st.inbox[0] = nil
	st.inbox = st.inbox[1:]
	st.inboxBytes -= len(b)
	if st.slot {
		c.holdLocked(st, -int64(len(b)+5))
	}
	c.mu.Unlock()
	if err := c.s.unmarshal(b, m); err != nil {
		return status.Errorf(codes.Internal, "grpc: error unmarshalling request: %v", err)
	}
	return nil
}
