// Package rlqs is the Rate Limit Quota Service
// (envoy.service.rate_limit_quota.v3.RateLimitQuotaService): Envoy's
// rate_limit_quota filter groups requests into buckets, enforces an
// assignment locally, and streams each bucket's usage to the service,
// which answers with assignments. No call sits in the request path.
//
// The service shares each bucket's limit among the Envoys that report it,
// in proportion to their demand (requests allowed and denied), recomputed
// at every report; see docs/rlqs.md for the arithmetic, the mapping from
// bucket ids to descriptors, and the bounds.
//
//   - The stream's domain comes from its first message; a later message
//     may repeat it and may not change it.
//   - The first report of a bucket id subscribes the stream to it, and is
//     answered at once with a provisional share (Envoy reports a new
//     bucket at once, with a time_elapsed of 0).
//   - A bucket id maps to descriptor entries in the order the domain's
//     descriptor tree nests its keys (descriptors.Config.BucketEntries),
//     so that one configuration serves ShouldRateLimit and RLQS; every
//     limit of the matched rule and of every level of its hierarchy is
//     in force.
//   - A replica pools its streams' reports of a bucket and writes the
//     bucket once per 5 s report slot (service.ChargeQuota): the allowed
//     requests, charged to the same bucket items as ShouldRateLimit
//     decisions, and the replica's demand rate, kept as a level in the
//     demand meters beside them, so that any call reads the fleet's demand
//     (see pool.go). Reports are answered at once from the last call, read
//     anew when it is over a second old; grants a call changes are pushed
//     between reports (push.go).
//   - Assignments are token buckets with a TTL (default 15 s: three of
//     Envoy 1.40's 5 s reports); a bucket that reports no demand for
//     AbandonAfter is abandoned.
//
// A malformed message ends its stream with InvalidArgument naming the
// problem, and a stream past a bound with ResourceExhausted: at most
// MaxBuckets buckets and MaxStreamBytes bytes of bucket ids per stream,
// MaxKeys keys per bucket id. A connection holds at most
// GRPC_MAX_CONCURRENT_STREAMS streams, so its memory is bounded by their
// product.
package rlqs
