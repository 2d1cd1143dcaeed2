// Package tracing exports OpenTelemetry traces of the rate-limit service,
// configured as envoyproxy/ratelimit's TRACING_* settings configure it: OTLP
// over HTTP or gRPC to the endpoint the standard OTEL_EXPORTER_OTLP_*
// variables name, a parent-based sampler with a ratio for root spans, and a
// resource carrying the service name, namespace and instance id.
//
// Spans come from wrappers, never from inside the decision or storage code:
//   - UnaryServerInterceptor starts one server span per gRPC call (the
//     decision of a ShouldRateLimit call), continuing the W3C trace context
//     (traceparent, tracestate, baggage) of the incoming gRPC metadata;
//   - Store wraps the service's store: one span per Acquire;
//   - DynamoDB wraps the DynamoDB client (dynamo.API): one client span per
//     call, a child of whatever span its context carries. The DynamoDB
//     store makes its bucket writes, cold reads and give-backs on its own
//     contexts, not a decision's: one conditional write carries every
//     decision queued on its item, and one read serves every decision
//     waiting for it. CallContext, the store's dynamo.WithCallContext hook,
//     makes such a call a child of the first decision it serves, links it
//     to the others, and records how many it served (ratelimit.decisions).
//
// A Provider and every wrapper are safe for concurrent use. Provider.Shutdown
// flushes the spans still batched and stops the exporter; no goroutine of
// the package outlives it.
package tracing
