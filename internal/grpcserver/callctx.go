package grpcserver

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// callCtx is a call's context: its parent's, and the call as the
// grpc.ServerTransportStream that grpc.SetHeader, grpc.SendHeader and
// grpc.SetTrailer find in it. It lives in the stream object, so that an
// inline call's context costs no allocation.
type callCtx struct {
	context.Context
	st *stream
}

// transportStreamKey is the key grpc.ServerTransportStreamFromContext
// looks up (grpc keeps its type unexported), learnt once by asking it.
var transportStreamKey = func() any {
	p := &keyProbe{Context: context.Background()}
	grpc.ServerTransportStreamFromContext(p)
	return p.key
}()

type keyProbe struct {
	context.Context
	key any
}

func (p *keyProbe) Value(k any) any { p.key = k; return nil }

// AfterFunc runs f once c is done (see deadlineCtx.AfterFunc): a context
// derived from the call's follows it without a goroutine.
func (c *callCtx) AfterFunc(f func()) (stop func() bool) {
	return context.AfterFunc(c.Context, f)
}

func (c *callCtx) Value(k any) any {
	if k == transportStreamKey {
		return (*transportStream)(c.st)
	}
	return c.Context.Value(k)
}

// transportStream is a stream seen as a grpc.ServerTransportStream.
type transportStream stream

var _ grpc.ServerTransportStream = (*transportStream)(nil)

var errHeaderSent = status.Error(codes.Internal, "transport: the stream is done or WriteHeader was already called")

func (ts *transportStream) Method() string { return ts.path }

// SetHeader adds md to the response headers, sent with the answer.
func (ts *transportStream) SetHeader(md metadata.MD) error {
	st := (*stream)(ts)
	st.c.mu.Lock()
	defer st.c.mu.Unlock()
	if st.headerSent || st.done {
		return errHeaderSent
	}
	st.header = metadata.Join(st.header, md)
	return nil
}

// SendHeader sends the response headers now, with md added.
func (ts *transportStream) SendHeader(md metadata.MD) error {
	st := (*stream)(ts)
	c := st.c
	c.mu.Lock()
	if st.headerSent || st.done {
		c.mu.Unlock()
		return errHeaderSent
	}
	c.writeResponseHeadersLocked(st, metadata.Join(st.header, md))
	c.mu.Unlock()
	c.flush()
	return nil
}

// SetTrailer adds md to the trailers, sent with the status.
func (ts *transportStream) SetTrailer(md metadata.MD) error {
	st := (*stream)(ts)
	st.c.mu.Lock()
	defer st.c.mu.Unlock()
	if st.done {
		return status.Error(codes.Internal, "transport: the stream is done")
	}
	st.trailer = metadata.Join(st.trailer, md)
	return nil
}
