package tracing

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/dynalimit/dynalimit/internal/service"
	"github.com/dynalimit/dynalimit/pkg/cascade"
)

// Store wraps st so that every Acquire is a span ("ratelimit.store.acquire")
// recording how many debits the plan carried and whether the store admitted
// it; a store error marks the span failed. A nil p returns st unchanged.
func Store(st service.Store, p *Provider) service.Store {
	if p == nil {
		return st
	}
	return &tracedStore{store: st, tracer: p.tracer}
}

type tracedStore struct {
	store  service.Store
	tracer trace.Tracer
}

var _ service.Store = (*tracedStore)(nil)

// Acquire decides plan with the wrapped store inside a span.
func (s *tracedStore) Acquire(ctx context.Context, plan *cascade.Plan) (cascade.Decision, error) {
	ctx, span := s.tracer.Start(ctx, "ratelimit.store.acquire",
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(attribute.Int("ratelimit.debits", len(plan.Debits))))
	defer span.End()
	dec, err := s.store.Acquire(ctx, plan)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		return dec, err
	}
	span.SetAttributes(attribute.Bool("ratelimit.admitted", dec.Admitted))
	return dec, nil
}
