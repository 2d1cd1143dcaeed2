package tracing

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Exporter protocols (TRACING_EXPORTER_PROTOCOL).
const (
	ProtocolHTTP = "http" // OTLP over HTTP, protobuf-encoded (default port 4318)
	ProtocolGRPC = "grpc" // OTLP over gRPC (default port 4317)
)

// instrumentationName names the tracer of every span this package starts.
const instrumentationName = "github.com/dynalimit/dynalimit/internal/tracing"

// Options configure a Provider.
type Options struct {
	// Protocol is ProtocolHTTP or ProtocolGRPC; empty means ProtocolHTTP.
	// The exporter reads its endpoint, headers, certificates, compression
	// and timeout from the standard OTEL_EXPORTER_OTLP_* variables
	// (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, …).
	Protocol string
	// ServiceName, ServiceNamespace and ServiceInstanceID make the
	// resource's service.name, service.namespace and service.instance.id.
	// An empty instance id is replaced by a random UUID, as
	// envoyproxy/ratelimit does; an empty namespace is left out.
	ServiceName, ServiceNamespace, ServiceInstanceID string
	// SamplingRate is the fraction of root traces sampled, in [0,1]; a span
	// with a parent follows its parent's decision.
	SamplingRate float64
	// Exporter, when set, replaces the OTLP exporter (tests). Spans are
	// then exported synchronously as each ends.
	Exporter sdktrace.SpanExporter
}

// Provider owns the tracer provider and its exporter.
type Provider struct {
	tp         *sdktrace.TracerProvider
	tracer     trace.Tracer
	propagator propagation.TextMapPropagator
	instanceID string
}

// New builds the exporter and the tracer provider. Nothing is sent until a
// span ends; an exporter that cannot reach its collector drops batches and
// reports through OpenTelemetry's error handler, never failing a decision.
func New(ctx context.Context, o Options) (*Provider, error) {
	if o.SamplingRate < 0 || o.SamplingRate > 1 || o.SamplingRate != o.SamplingRate {
		return nil, fmt.Errorf("tracing: sampling rate %v: want a value in [0,1]", o.SamplingRate)
	}
	instance := o.ServiceInstanceID
	if instance == "" {
		var err error
		if instance, err = randomUUID(); err != nil {
			return nil, fmt.Errorf("tracing: service instance id: %w", err)
		}
	}
	attrs := []attribute.KeyValue{
		attribute.String("service.name", o.ServiceName),
		attribute.String("service.instance.id", instance),
	}
	if o.ServiceNamespace != "" {
		attrs = append(attrs, attribute.String("service.namespace", o.ServiceNamespace))
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attrs...))
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}

	opts := []sdktrace.TracerProviderOption{
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(o.SamplingRate))),
		sdktrace.WithResource(res),
	}
	if o.Exporter != nil {
		opts = append(opts, sdktrace.WithSyncer(o.Exporter))
	} else {
		exp, err := newExporter(ctx, o.Protocol)
		if err != nil {
			return nil, err
		}
		opts = append(opts, sdktrace.WithBatcher(exp))
	}
	tp := sdktrace.NewTracerProvider(opts...)
	return &Provider{
		tp:         tp,
		tracer:     tp.Tracer(instrumentationName),
		propagator: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
		instanceID: instance,
	}, nil
}

func newExporter(ctx context.Context, protocol string) (sdktrace.SpanExporter, error) {
	switch protocol {
	case ProtocolHTTP, "":
		exp, err := otlptracehttp.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("tracing: OTLP/HTTP exporter: %w", err)
		}
		return exp, nil
	case ProtocolGRPC:
		exp, err := otlptracegrpc.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("tracing: OTLP/gRPC exporter: %w", err)
		}
		return exp, nil
	}
	return nil, fmt.Errorf("tracing: exporter protocol %q: want %s or %s", protocol, ProtocolHTTP, ProtocolGRPC)
}

// Tracer returns the tracer the wrappers use.
func (p *Provider) Tracer() trace.Tracer { return p.tracer }

// InstanceID returns the service.instance.id of the resource.
func (p *Provider) InstanceID() string { return p.instanceID }

// ForceFlush exports every span that has ended and is still batched.
func (p *Provider) ForceFlush(ctx context.Context) error { return p.tp.ForceFlush(ctx) }

// Shutdown flushes the spans still batched, within ctx, and stops the
// exporter. Spans started afterwards are dropped.
func (p *Provider) Shutdown(ctx context.Context) error {
	if err := p.tp.Shutdown(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("tracing: shutdown: %w", err)
	}
	return nil
}

// randomUUID returns a random (version 4) UUID in its canonical text form.
func randomUUID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]), nil
}
