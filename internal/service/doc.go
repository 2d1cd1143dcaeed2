// Package service is the Envoy rate-limit service handler
// (envoy.service.ratelimit.v3.RateLimitService): it turns a RateLimitRequest
// into one cascade.Plan, has a Store decide it, and answers with Envoy's
// RateLimitResponse, optional RateLimit-* headers and dynamic metadata.
//
// Semantics follow envoyproxy/ratelimit's service, with exact token buckets:
//   - each request descriptor is matched against the descriptor
//     configuration; unknown domains and unmatched descriptors are OK with no
//     current_limit, unlimited rules are OK without touching the store, and a
//     limit with requests_per_unit 0 denies without touching the store; a
//     rule whose namespace is deleted (WithNamespaceGate) is unmatched;
//   - hits are the descriptor's hits_addend when set (0 checks without
//     debiting), else the request's hits_addend, else 1; is_negative_hits
//     refunds them; a limit with charge: post, and by default a limit with
//     no charge mode when the hits are the descriptor's own hits_addend
//     (Envoy's stream-end costs), charges them: debited even past zero
//     whatever the decision, OVER_LIMIT when they did not fit (see
//     WithDescriptorHitsCharge);
//   - a descriptor's limit override replaces the configured rule (its own
//     bucket limit, never in shadow mode), as Envoy's rate-limit override;
//   - a rule's replaces drops the rules it names from the request;
//   - every limit of every descriptor is one debit of one plan, decided
//     all-or-nothing by the store: a refused request debits nothing;
//   - shadow-mode rules (and the global shadow mode) never refuse; quota-mode
//     rules refuse only when every quota-mode debit of the request is refused;
//   - dynamic metadata has envoyproxy/ratelimit's shape (metadata.go), or
//     more with WithExtendedMetadata;
//   - when the store fails, ON_UNAVAILABLE decides: allow (OK) or block
//     (OVER_LIMIT).
//
// Units: hits are whole tokens on the wire and millitokens (×1000) in plans;
// limit_remaining is whole tokens, floored, never negative.
//
// Requests are bounded (RequestLimits: descriptors per request, entries per
// descriptor, bytes per domain, key or value) and must be valid UTF-8. Over
// gRPC (RegisterGRPC with the ServerCodec option) the bounds are checked on
// the wire bytes before the request is decoded, so an oversized request
// costs what its first bytes past a bound cost; a request that does not
// decode is InvalidArgument too, not gRPC's Internal. Every refusal as
// invalid is counted by reason. A decision's work is linear in the size of
// the request.
//
// The handler reads in phases, one file each: request.go (what was asked),
// plan.go (which rules apply, and the plan), outcome.go (what the store
// decided, or its failure, means for each descriptor), respond.go (statuses
// and headers), metadata.go, observe.go (metrics), throttle.go (the
// store-failure log throttle) and wire.go (the gRPC handler).
//
// Handlers return only gRPC status errors (InvalidArgument for malformed
// requests, Unavailable without a configuration) and never panic on input.
// A Service is immutable after New and safe for concurrent use; each request
// loads the configuration once.
package service
