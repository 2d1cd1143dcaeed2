// Package tracing exports OpenTelemetry traces of the rate-limit service,
// configured as envoyproxy/ratelimit's TRACING_* settings configure it: OTLP
// over HTTP or gRPC to the endpoint the standard OTEL_EXPORTER_OTLP_*
// variables name, a parent-based sampler with a ratio for root spans, and a
// resource carrying the service name, namespace and instance id.
//
// Spans come from wrappers and client options, never from inside the
// decision or storage code:
//   - UnaryServerInterceptor starts one server span per gRPC call (the
//     decision of a ShouldRateLimit call), continuing the W3C trace context
//     (traceparent, tracestate, baggage) of the incoming gRPC metadata;
//   - Store wraps the service's store: one span per Acquire;
//   - DynamoDB is an option of the DynamoDB client: a middleware on the
//     SDK's stack makes one client span per call of any operation, a child
//     of whatever span its context carries.
//
// The DynamoDB store makes its bucket writes, cold reads and give-backs on
// its own contexts, not a decision's: one conditional write carries every
// decision queued on its item, one read serves every decision waiting for
// it, and either outlives the decisions that gave up. CallContext, the
// store's dynamo.WithCallContext hook, puts such calls back in the
// decisions' traces without borrowing their deadlines: a call's span is a
// child of the store span of the first decision it serves (the one that
// started the batch or the read; the first sampled one when that one is
// not), so a decision alone on its item is one nested trace: server span,
// store span, DynamoDB.UpdateItem. The call links to the store spans of the
// other decisions it serves, the ones that join a read under way included
// (dynamo.WithCallJoin), and records how many it served
// (ratelimit.decisions); each of those store spans gets a
// ratelimit.shared_call event naming the call's trace and span ids. Such a
// call is a root span only when none of the decisions that started it is
// traced.
//
// A Provider and every wrapper are safe for concurrent use. Provider.Shutdown
// flushes the spans still batched and stops the exporter; no goroutine of
// the package outlives it.
package tracing
