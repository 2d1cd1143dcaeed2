package grpcserver

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/mem"
)

// Defaults of Options.
const (
	DefaultMaxRecvMsgSize       = 4 << 20 // grpc-go's
	DefaultMaxConcurrentStreams = 1000
	defaultHandshakeTimeout     = 120 * time.Second // grpc-go's connection timeout
	minKeepaliveTime            = time.Second       // grpc-go's floor for Keepalive.Time
)

// Options configures a Server.
type Options struct {
	// Codec encodes and decodes the messages of every method (grpc-go's
	// proto codec when nil). One that also implements BytesCodec is
	// called without a mem.BufferSlice on either side.
	Codec encoding.CodecV2
	// UnaryInterceptor wraps every unary call (grpc.ChainUnaryInterceptor
	// builds one of several).
	UnaryInterceptor grpc.UnaryServerInterceptor
	// UnaryMetadata gives unary calls' contexts the request's metadata
	// (metadata.FromIncomingContext), as grpc-go always does: set it when
	// an interceptor or handler reads it (trace context). Streaming calls
	// always have it.
	UnaryMetadata bool
	// Inline answers unary calls on the connection's reader. Set it only
	// when no unary handler waits: a handler that waits there stalls every
	// call on its connection.
	Inline bool
	// TLS, when set, serves over TLS (h2 by ALPN).
	TLS *tls.Config
	// Keepalive is grpc-go's, with its defaults for zero fields:
	// MaxConnectionIdle closes a connection gracefully after that long
	// with no call (zero: never); MaxConnectionAge once it is this old
	// (±10%), and at once MaxConnectionAgeGrace later (zero: never); a
	// connection that has sent nothing for Time (2 h) is pinged, and
	// closed if nothing comes within Timeout (20 s). Timeout also bounds
	// a write that makes no progress.
	Keepalive keepalive.ServerParameters
	// KeepalivePolicy is grpc-go's ping policy, with its defaults: a
	// client that pings more often than MinTime (5 min) while nothing is
	// sent to it, or at all while no call is open unless
	// PermitWithoutStream, is sent GOAWAY "too_many_pings" on its third
	// strike.
	KeepalivePolicy keepalive.EnforcementPolicy
	// MaxRecvMsgSize bounds a request message; zero: 4 MiB.
	MaxRecvMsgSize int
	// MaxConcurrentStreams bounds the calls one connection holds at once
	// (SETTINGS_MAX_CONCURRENT_STREAMS); zero: DefaultMaxConcurrentStreams.
	// A call holds its slot until its handler returns, even when the
	// client reset it.
	MaxConcurrentStreams uint32
	// Logger receives connection errors; nil: logrus's standard logger.
	Logger *logrus.Entry
}

// BytesCodec is the part of a codec that works on plain byte slices, so
// that a request is decoded from the frame it arrived in and an answer is
// encoded into the connection's write buffer.
type BytesCodec interface {
	// UnmarshalBytes decodes b into v. b is valid only during the call.
	UnmarshalBytes(b []byte, v any) error
	// MarshalAppend appends v's encoding to b.
	MarshalAppend(b []byte, v any) ([]byte, error)
}

// Server serves gRPC on HTTP/2. Build it with New, register services, then
// Serve.
type Server struct {
	o       Options
	codec   encoding.CodecV2
	bytes   BytesCodec // nil when codec is not one
	methods map[string]*method
	info    map[string]grpc.ServiceInfo
	log     *logrus.Entry

	mu        sync.Mutex
	listeners map[net.Listener]bool
	accepted  map[net.Conn]bool // before their TLS handshake ends
	conns     map[*conn]bool
	stopping  bool
	connsDone sync.WaitGroup
	// handlers counts the calls' goroutines (unary calls when not
	// Inline, streaming calls): Stop and GracefulStop wait for them.
	handlers sync.WaitGroup
}

// method is one registered method.
type method struct {
	name   string // "/service/Method"
	impl   any
	unary  grpc.MethodHandler // nil for a streaming method
	stream grpc.StreamHandler
	desc   grpc.StreamDesc
}

var _ grpc.ServiceRegistrar = (*Server)(nil)

// New returns a Server with no services.
func New(o Options) *Server {
	if o.Codec == nil {
		o.Codec = encoding.GetCodecV2(grpcproto.Name)
	}
	if o.MaxRecvMsgSize <= 0 {
		o.MaxRecvMsgSize = DefaultMaxRecvMsgSize
	}
	if o.MaxConcurrentStreams == 0 {
		o.MaxConcurrentStreams = DefaultMaxConcurrentStreams
	}
	if o.Logger == nil {
		o.Logger = logrus.NewEntry(logrus.StandardLogger())
	}
	if o.Keepalive.Time == 0 {
		o.Keepalive.Time = defaultKeepaliveTime
	}
	o.Keepalive.Time = max(o.Keepalive.Time, minKeepaliveTime)
	if o.Keepalive.Timeout == 0 {
		o.Keepalive.Timeout = defaultKeepaliveTimeout
	}
	if o.KeepalivePolicy.MinTime == 0 {
		o.KeepalivePolicy.MinTime = defaultKeepaliveMinTime
	}
	s := &Server{
		o:         o,
		codec:     o.Codec,
		methods:   map[string]*method{},
		info:      map[string]grpc.ServiceInfo{},
		log:       o.Logger,
		listeners: map[net.Listener]bool{},
		accepted:  map[net.Conn]bool{},
		conns:     map[*conn]bool{},
	}
	s.bytes, _ = o.Codec.(BytesCodec)
	return s
}

// RegisterService registers impl's methods as desc describes them, as
// grpc.Server does; it panics when impl does not implement
// desc.HandlerType or a service is registered twice.
func (s *Server) RegisterService(desc *grpc.ServiceDesc, impl any) {
	if impl != nil {
		ht := reflect.TypeOf(desc.HandlerType).Elem()
		if !reflect.TypeOf(impl).Implements(ht) {
			panic(fmt.Sprintf("grpcserver: RegisterService found the handler of type %v that does not satisfy %v", reflect.TypeOf(impl), ht))
		}
	}
	if _, dup := s.info[desc.ServiceName]; dup {
		panic("grpcserver: service " + desc.ServiceName + " registered twice")
	}
	info := grpc.ServiceInfo{Metadata: desc.Metadata}
	for _, m := range desc.Methods {
		s.methods["/"+desc.ServiceName+"/"+m.MethodName] = &method{name: "/" + desc.ServiceName + "/" + m.MethodName, impl: impl, unary: m.Handler}
		info.Methods = append(info.Methods, grpc.MethodInfo{Name: m.MethodName})
	}
	for _, d := range desc.Streams {
		s.methods["/"+desc.ServiceName+"/"+d.StreamName] = &method{name: "/" + desc.ServiceName + "/" + d.StreamName, impl: impl, stream: d.Handler, desc: d}
		info.Methods = append(info.Methods, grpc.MethodInfo{Name: d.StreamName, IsClientStream: d.ClientStreams, IsServerStream: d.ServerStreams})
	}
	s.info[desc.ServiceName] = info
}

// GetServiceInfo returns the registered services, for reflection.
func (s *Server) GetServiceInfo() map[string]grpc.ServiceInfo {
	out := make(map[string]grpc.ServiceInfo, len(s.info))
	for k, v := range s.info {
		v.Methods = slices.Clone(v.Methods)
		out[k] = v
	}
	return out
}

// ErrServerStopped is Serve's answer once the server was stopped.
var ErrServerStopped = errors.New("grpcserver: the server has been stopped")

// Serve accepts connections on lis until it fails or the server stops;
// it returns nil after GracefulStop or Stop, as grpc.Server.Serve does.
func (s *Server) Serve(lis net.Listener) error {
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		_ = lis.Close()
		return ErrServerStopped
	}
	s.listeners[lis] = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, lis)
		s.mu.Unlock()
	}()
	var backoff time.Duration
	for {
		nc, err := lis.Accept()
		if err != nil {
			s.mu.Lock()
			stopping := s.stopping
			s.mu.Unlock()
			if stopping {
				return nil
			}
			var ne interface{ Temporary() bool }
			if errors.As(err, &ne) && ne.Temporary() {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		s.mu.Lock()
		if s.stopping {
			s.mu.Unlock()
			_ = nc.Close()
			return nil
		}
		s.connsDone.Add(1)
		s.mu.Unlock()
		go s.handle(nc)
	}
}

// handle runs one connection: the TLS handshake, then HTTP/2.
func (s *Server) handle(nc net.Conn) {
	defer s.connsDone.Done()
	if s.o.TLS != nil {
		// A stop closes a connection still in its handshake.
		s.mu.Lock()
		s.accepted[nc] = true
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			delete(s.accepted, nc)
			s.mu.Unlock()
		}()
		cfg := s.o.TLS.Clone()
		if !slices.Contains(cfg.NextProtos, "h2") {
			cfg.NextProtos = append([]string{"h2"}, cfg.NextProtos...)
		}
		tc := tls.Server(nc, cfg)
		_ = nc.SetDeadline(time.Now().Add(defaultHandshakeTimeout))
		if err := tc.Handshake(); err != nil {
			s.log.WithError(err).WithField("remote", nc.RemoteAddr().String()).Debug("grpc: TLS handshake failed")
			_ = nc.Close()
			return
		}
		_ = nc.SetDeadline(time.Time{})
		nc = tc
	}
	c := newConn(s, nc)
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		_ = nc.Close()
		return
	}
	s.conns[c] = true
	s.mu.Unlock()
	c.serve()
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// GracefulStop stops accepting connections, tells every client to open no
// more calls (GOAWAY), lets the calls in flight end, and returns once
// every connection is closed.
func (s *Server) GracefulStop() {
	for _, c := range s.stop() {
		c.drain()
	}
	s.connsDone.Wait()
	s.handlers.Wait()
}

// Stop closes every listener and connection at once; calls in flight see
// their contexts cancelled.
func (s *Server) Stop() {
	for _, c := range s.stop() {
		c.kill()
	}
	s.connsDone.Wait()
	s.handlers.Wait()
}

// stop marks the server stopping, closes its listeners and returns its
// connections.
func (s *Server) stop() []*conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopping = true
	for l := range s.listeners {
		_ = l.Close()
	}
	for nc := range s.accepted {
		_ = nc.Close()
	}
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	return conns
}

// unmarshal decodes a request message.
func (s *Server) unmarshal(b []byte, v any) error {
	if s.bytes != nil {
		return s.bytes.UnmarshalBytes(b, v)
	}
	return s.codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, v)
}

// marshalAppend appends v's encoding to b.
func (s *Server) marshalAppend(b []byte, v any) ([]byte, error) {
	if s.bytes != nil {
		return s.bytes.MarshalAppend(b, v)
	}
	data, err := s.codec.Marshal(v)
	if err != nil {
		return b, err
	}
	for _, buf := range data {
		b = append(b, buf.ReadOnlyData()...)
	}
	data.Free()
	return b, nil
}
