// Package adjust settles what a request really cost after its response:
// the lease an admission issues, and the settlement of that lease by
// either path that reports the cost (an access-log entry, internal/accesslog,
// or a ShouldRateLimit call at the end of the stream, internal/service).
//
// An admission whose domain configures adjustments (descriptor YAML
// `adjustments:`) debits an estimate, and Issue signs a lease (internal/lease)
// naming every bucket it debited for an adjusted limit, on every level of a
// hierarchy, with the estimate per limit. Settle verifies a lease and
// applies actual − estimate to exactly those buckets, as one
// cascade.Settlement whose ID is the lease's: a charge when the request cost
// more (into debt if need be), a refund when it cost less (never more than
// the estimate, never above capacity). The store applies an ID at most once,
// so whichever path lands first settles and the other is a counted
// duplicate.
//
// A limit in dollars (descriptors.Limit.Money) settles from the input and
// output tokens a report gives (Report.Split), at the price the lease
// carries: the price of the request's resource when it was admitted, so
// that a price changed on reload never touches an admitted request. Its
// actual cost is Price.Cost(in, out) in nano-dollars (the limit's
// millitokens), so the estimate and the settlement add up to the priced
// report exactly. A report without both counts leaves its estimate
// standing. Any other limit settles from a count of whole tokens, as it
// always has.
//
// A settlement the store did not take (unavailable, or its answer lost) is
// kept and retried in the background, at most MaxPending at once, until it
// lands, is a duplicate, or its lease expires: an accepted cost is never
// dropped while its lease can settle, and the store's ID makes a retry of a
// write that did land a duplicate rather than a second charge.
package adjust
