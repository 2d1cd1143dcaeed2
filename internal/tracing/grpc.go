package tracing

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// untraced are the gRPC services whose calls start no span: health checks
// and reflection would otherwise drown the decisions.
var untraced = []string{"/grpc.health.v1.Health/", "/grpc.reflection."}

// UnaryServerInterceptor starts a server span around every unary call,
// named after its method (e.g.
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit), as a child
// of the W3C trace context found in the call's incoming metadata; without
// one it starts a new trace, sampled at the configured rate. The span ends
// with the call's gRPC status code.
func (p *Provider) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		for _, prefix := range untraced {
			if strings.HasPrefix(info.FullMethod, prefix) {
				return handler(ctx, req)
			}
		}
		if md, ok := metadata.FromIncomingContext(ctx); ok {
			ctx = p.propagator.Extract(ctx, metadataCarrier(md))
		}
		name := strings.TrimPrefix(info.FullMethod, "/")
		service, method, _ := strings.Cut(name, "/")
		ctx, span := p.tracer.Start(ctx, name,
			trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(
				attribute.String("rpc.system", "grpc"),
				attribute.String("rpc.service", service),
				attribute.String("rpc.method", method),
			))
		defer span.End()
		resp, err := handler(ctx, req)
		st := status.Convert(err)
		span.SetAttributes(attribute.Int("rpc.grpc.status_code", int(st.Code())))
		if err != nil {
			span.SetStatus(codes.Error, st.Message())
		}
		return resp, err
	}
}

// metadataCarrier reads and writes W3C trace headers in gRPC metadata,
// whose keys are lower-case.
type metadataCarrier metadata.MD

func (c metadataCarrier) Get(key string) string {
	if v := metadata.MD(c).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c metadataCarrier) Set(key, value string) { metadata.MD(c).Set(key, value) }

func (c metadataCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
