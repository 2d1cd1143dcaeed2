package server

import (
	"context"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/keepalive"

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
		ka := keepalive.ServerParameters{MaxConnectionAge: o.MaxConnectionAge, MaxConnectionAgeGrace: o.MaxConnectionAgeGrace}
		if ka.MaxConnectionAge > 0 {
			gopts = append(gopts, grpc.KeepaliveParams(ka))
		}
		return grpc.NewServer(gopts...)
	}
	no := grpcserver.Options{
		Inline:                o.InlineCalls,
		UnaryMetadata:         o.UnaryMetadata,
		TLS:                   o.TLS,
		MaxConnectionAge:      o.MaxConnectionAge,
		MaxConnectionAgeGrace: o.MaxConnectionAgeGrace,
		Logger:                o.Logger,
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
