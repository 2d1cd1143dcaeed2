// Package accesslog is the access-log sink: Envoy's gRPC access-log
// service (envoy.service.accesslog.v3.AccessLogService/StreamAccessLogs),
// served on the same gRPC server and port as the rate-limit service, which
// settles what each request really cost.
//
// For each HTTP entry the sink finds the lease the admission returned
// (common_properties.metadata, under envoy.filters.http.ratelimit, field
// dynalimit.lease), verifies it, reads the actual cost of each of its limits
// from where the domain's `adjustments:` say (a response header, a response
// trailer, or a dynamic-metadata key), and has the adjuster
// (internal/adjust) apply actual − estimate to exactly the buckets the lease
// names, once per lease whatever else delivers it. A limit in dollars
// reads two fields, the input and output tokens its adjustment names
// (Envoy AI Gateway's llm_input_token and llm_output_token), and is charged
// them at the price its lease carries; an entry with one of them only
// reports no cost for it.
//
// Entries that settle nothing are counted by reason: no lease, a lease that
// does not verify (malformed, bad_signature, unknown_key, expired), no cost
// for any of the lease's limits (no_cost: a client that went away before
// the response; the estimate stands, the cost is never guessed), a cost
// that is not a whole number of tokens (bad_cost; for a limit in dollars,
// either count), and TCP entries
// (not_http).
//
// A stream settles up to MaxInFlight entries at once; past that it stops
// reading, and HTTP/2 flow control holds Envoy back (Envoy buffers, then
// drops, as its access log is lossy by design). An entry is settled once it
// is read: a stream cut mid-batch loses at most the entries not yet
// received, and a batch that Envoy sends again settles nothing twice.
package accesslog
