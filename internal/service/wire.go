package service

import (
	"context"
	"fmt"
	"sync"
	"unicode/utf8"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// gRPC decodes a request before the handler sees it, and answers a request
// it cannot decode (invalid UTF-8 in a string, say) with Internal, uncounted.
// So the service registers its own method handler, which receives the
// request's bytes through ServerCodec, checks them against the request
// limits before anything is allocated, and decodes them itself: a malformed
// request is InvalidArgument and counted, and a request with 60,000
// descriptors is refused after reading the 257th tag rather than after
// decoding them all.

// rawRequest carries a request's wire bytes from ServerCodec to the
// handler, or the problem found in them before they were copied.
type rawRequest struct {
	b       []byte
	invalid *invalidError
}

// GRPCServerOptions returns the gRPC server options the service's handler
// needs (see RegisterGRPC): the standard proto codec, except that a
// RateLimitRequest reaches the handler undecoded, checked against the
// request limits on its first buffer before it is copied.
func (s *Service) GRPCServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ForceServerCodecV2(s.Codec()),
	}
}

// codec is the proto codec for every message but rawRequest, whose bytes it
// copies.
type codec struct {
	proto  encoding.CodecV2
	limits RequestLimits
}

func (c codec) Marshal(v any) (mem.BufferSlice, error) { return c.proto.Marshal(v) }

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	if r, ok := v.(*rawRequest); ok {
		// A request far past a bound is usually refused on its first
		// buffer (a 16 KiB frame holds a thousand small descriptors), so
		// it costs no copy: a scan of a prefix finds every problem that
		// lies inside it, and ignores the cut.
		if len(data) > 1 {
			if e := c.limits.scanRequest(data[0].ReadOnlyData()); e != nil {
				r.invalid = e
				return nil
			}
		}
		r.b = data.Materialize()
		return nil
	}
	return c.proto.Unmarshal(data, v)
}

func (c codec) Name() string { return grpcproto.Name }

// UnmarshalBytes is Unmarshal for a request in one slice, which a
// rawRequest keeps without a copy: the slice is valid while the call runs,
// and the handler decodes it before it returns.
func (c codec) UnmarshalBytes(b []byte, v any) error {
	if r, ok := v.(*rawRequest); ok {
		r.b = b
		return nil
	}
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("service: cannot decode into %T, not a proto message", v)
	}
	return proto.Unmarshal(b, m)
}

// MarshalAppend appends v's encoding to b: an answer is encoded into the
// connection's write buffer, not into a slice of its own.
func (c codec) MarshalAppend(b []byte, v any) ([]byte, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return b, fmt.Errorf("service: cannot encode %T, not a proto message", v)
	}
	return proto.MarshalOptions{}.MarshalAppend(b, m)
}

// Codec returns the codec GRPCServerOptions installs, for a server that
// takes one directly (internal/grpcserver).
func (s *Service) Codec() encoding.CodecV2 {
	return codec{proto: encoding.GetCodecV2(grpcproto.Name), limits: s.limits}
}

// RegisterGRPC registers s as envoy.service.ratelimit.v3.RateLimitService on
// gs, which must be built with s's GRPCServerOptions. Interceptors see the
// request undecoded.
func (s *Service) RegisterGRPC(gs grpc.ServiceRegistrar) {
	gs.RegisterService(&serviceDesc, s)
}

var serviceDesc = grpc.ServiceDesc{
	ServiceName: pb.RateLimitService_ServiceDesc.ServiceName,
	HandlerType: (*pb.RateLimitServiceServer)(nil),
	Methods:     []grpc.MethodDesc{{MethodName: "ShouldRateLimit", Handler: shouldRateLimitHandler}},
	Metadata:    pb.RateLimitService_ServiceDesc.Metadata,
}

func shouldRateLimitHandler(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	s := srv.(*Service)
	raw := rawPool.Get().(*rawRequest)
	defer func() {
		*raw = rawRequest{}
		rawPool.Put(raw)
	}()
	if err := dec(raw); err != nil {
		return nil, err
	}
	if interceptor == nil {
		return s.decideRaw(ctx, raw)
	}
	return interceptor(ctx, raw, s.rlsInfo, s.decideRawFn)
}

// rawPool holds the requests' rawRequest wrappers: a call's is free again
// once its answer is built (the answer refers to none of it).
var rawPool = sync.Pool{New: func() any { return new(rawRequest) }}

// decideRaw answers a rawRequest; decideRawFn is it as a grpc.UnaryHandler,
// bound once.
func (s *Service) decideRaw(ctx context.Context, req any) (any, error) {
	raw := req.(*rawRequest)
	if raw.invalid != nil {
		return nil, s.refuse(raw.invalid)
	}
	return s.shouldRateLimitWire(ctx, raw.b)
}

// requestPool holds decoded requests: the service keeps no pointer into a
// request once it has answered it (only strings, which are copies).
var requestPool = sync.Pool{New: func() any { return new(pb.RateLimitRequest) }}

// shouldRateLimitWire checks and decodes one wire-format request, then
// decides it.
func (s *Service) shouldRateLimitWire(ctx context.Context, b []byte) (*pb.RateLimitResponse, error) {
	if e := s.limits.scanRequest(b); e != nil {
		return nil, s.refuse(e)
	}
	req := requestPool.Get().(*pb.RateLimitRequest)
	defer func() {
		proto.Reset(req)
		requestPool.Put(req)
	}()
	if err := proto.Unmarshal(b, req); err != nil {
		return nil, s.refuse(invalid(reasonMalformed, "service: decode request: "+err.Error()))
	}
	return s.ShouldRateLimit(ctx, req)
}

// Field numbers of the messages scanRequest reads
// (envoy.service.ratelimit.v3.RateLimitRequest and
// envoy.extensions.common.ratelimit.v3.RateLimitDescriptor).
const (
	fieldRequestDomain      protowire.Number = 1
	fieldRequestDescriptors protowire.Number = 2
	fieldDescriptorEntries  protowire.Number = 1
	fieldEntryKey           protowire.Number = 1
	fieldEntryValue         protowire.Number = 2
)

// scanRequest checks a wire-format RateLimitRequest against l without
// decoding it: descriptor and entry counts, text lengths and UTF-8. It
// stops at the first problem, so a request far past a bound costs what its
// first bytes past the bound cost. Bytes that are not well-formed are left
// for the decoder to report.
func (l RequestLimits) scanRequest(b []byte) *invalidError {
	descs := 0
	return scanFields(b, func(num protowire.Number, v []byte) *invalidError {
		switch num {
		case fieldRequestDomain:
			return l.checkText("domain", -1, 0, len(v), utf8.Valid(v))
		case fieldRequestDescriptors:
			i := descs
			descs++
			if e := l.checkDescriptors(descs); e != nil {
				return e
			}
			return l.scanDescriptor(i, v)
		}
		return nil
	})
}

func (l RequestLimits) scanDescriptor(i int, b []byte) *invalidError {
	entries := 0
	return scanFields(b, func(num protowire.Number, v []byte) *invalidError {
		if num != fieldDescriptorEntries {
			return nil
		}
		j := entries
		entries++
		if e := l.checkEntries(i, entries); e != nil {
			return e
		}
		return scanFields(v, func(num protowire.Number, v []byte) *invalidError {
			switch num {
			case fieldEntryKey:
				return l.checkText("key", i, j, len(v), utf8.Valid(v))
			case fieldEntryValue:
				return l.checkText("value", i, j, len(v), utf8.Valid(v))
			}
			return nil
		})
	})
}

// scanFields calls f with every length-delimited field of message b, in
// order, until f reports a problem. It stops quietly at malformed bytes.
func scanFields(b []byte, f func(num protowire.Number, v []byte) *invalidError) *invalidError {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil
		}
		b = b[n:]
		if typ != protowire.BytesType {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return nil
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return nil
		}
		b = b[n:]
		if e := f(num, v); e != nil {
			return e
		}
	}
	return nil
}
