package server

import (
	"context"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/encoding"

	"github.com/dynalimit/dynalimit/internal/grpcserver"
)

// The gRPC transports (GRPC_TRANSPORT).
const (
	// TransportNative is internal/grpcserver: calls answered on the
	// connection's reader when InlineCalls, one write per batch.
	TransportNative = "native"
	// TransportGRPCGo is grpc-go's own server.
	TransportGRPCGo = "grpc-go"
)

// grpcServer is what the server needs of a gRPC server; *grpc.Server and
// *grpcserver.Server are both one.
type grpcServer interface {
	grpc.ServiceRegistrar
	GetServiceInfo() map[string]grpc.ServiceInfo
	Serve(net.Listener) error
	GracefulStop()
	Stop()
}

// selfRegistering is a rate-limit service that registers its own method
// handler (a *service.Service): it checks a request's bytes before they
// are decoded, with its own codec.
type selfRegistering interface {
	GRPCServerOptions() []grpc.ServerOption
	Codec() encoding.CodecV2
	RegisterGRPC(grpc.ServiceRegistrar)
}

// newGRPCServer builds the gRPC server o asks for.
func newGRPCServer(o Options) grpcServer {
	rls, self := o.RateLimit.(selfRegistering)
	if o.Transport == TransportGRPCGo {
		var gopts []grpc.ServerOption
		if self {
			gopts = append(gopts, rls.GRPCServerOptions()...)
		}
		if o.TLS != nil {
			gopts = append(gopts, grpc.Creds(credentials.NewTLS(o.TLS)))
		}
		if len(o.UnaryInterceptors) > 0 {
			gopts = append(gopts, grpc.ChainUnaryInterceptor(o.UnaryInterceptors...))
		}
		gopts = append(gopts,
			grpc.KeepaliveParams(o.Keepalive),
			grpc.KeepaliveEnforcementPolicy(o.KeepalivePolicy),
			// grpc-go runs no more handlers at once than this (its guard
			// against rapid reset; its own default is no limit).
			grpc.MaxConcurrentStreams(maxStreams(o)),
			// Stop waits for the handlers, as the native transport does.
			grpc.WaitForHandlers(true))
		return grpc.NewServer(gopts...)
	}
	no := grpcserver.Options{
		Inline:               o.InlineCalls,
		UnaryMetadata:        o.UnaryMetadata,
		TLS:                  o.TLS,
		Keepalive:            o.Keepalive,
		KeepalivePolicy:      o.KeepalivePolicy,
		MaxConcurrentStreams: maxStreams(o),
		Logger:               o.Logger,
	}
	if self {
		no.Codec = rls.Codec()
	}
	switch len(o.UnaryInterceptors) {
	case 0:
	case 1:
		no.UnaryInterceptor = o.UnaryInterceptors[0]
	default:
		no.UnaryInterceptor = chainUnary(o.UnaryInterceptors)
	}
	return grpcserver.New(no)
}

// Defaults of the gRPC settings both transports read: grpc-go's keepalive
// defaults, and the native transport's stream limit.
const (
	DefaultMaxConcurrentStreams = grpcserver.DefaultMaxConcurrentStreams
	DefaultKeepaliveTime        = 2 * time.Hour
	DefaultKeepaliveTimeout     = 20 * time.Second
	DefaultKeepaliveMinTime     = 5 * time.Minute
)

func maxStreams(o Options) uint32 {
	if o.MaxConcurrentStreams == 0 {
		return DefaultMaxConcurrentStreams
	}
	return o.MaxConcurrentStreams
}

// chainUnary runs interceptors first to last around the handler, as
// grpc.ChainUnaryInterceptor does.
func chainUnary(is []grpc.UnaryServerInterceptor) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		return is[0](ctx, req, info, chainFrom(is[1:], info, handler))
	}
}

func chainFrom(is []grpc.UnaryServerInterceptor, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) grpc.UnaryHandler {
	if len(is) == 0 {
		return handler
	}
	return func(ctx context.Context, req any) (any, error) {
		return is[0](ctx, req, info, chainFrom(is[1:], info, handler))
	}
}
