// Package usage is the usage history of a dynalimit table: the snapshots of
// what each entity and resource consumed per hour, day and month, the
// folding of the table's stream records into them (Aggregator, Process)
// exactly once, and the stream poller's checkpoints and lease.
//
// The Aggregator turns the table's stream records into usage: what
// each entity consumed of each limit of each resource, per hour, day and
// month. It is the one entry point of both consumers of the stream, the
// Lambda (cmd/aggregator-lambda) and the poller (ratelimit aggregator):
// each hands Process the records it received, in stream order, and
// retries the ones Process reports failed.
//
// Usage comes from the consumption counters of bucket items (b_{limit}_tc,
// millitokens debited), never from their levels, which refill and clamping
// distort: a record's usage of a limit is the counter's new value less its
// old one (from zero on a new item or a limit new to it). Every shard of a
// sharded bucket keeps its own counter, in whole-bucket millitokens, so
// the shards' records add up to the bucket's usage. Records of other items
// (entities, limits, markers, snapshots themselves) and removals (expiry,
// a purge) carry no usage.
//
// What the counter holds decides what counts. Consumes of admitted
// requests and charges add to it, refunds subtract (a request that cost
// less than estimated used less), and so does the give-back of a refused
// multi-item plan: the parts of such a plan that consumed before the plan
// was refused give their tokens back, and the give-back's negative delta
// cancels what they added. A refused request therefore counts nothing,
// and a give-back is never mistaken for usage. (Were give-backs left out,
// the refused plan's consumes would count as usage.) A give-back lands
// within milliseconds of its consume, so both fall in one window but
// across a window's boundary; one DynamoDB never took (dropped after
// GiveBackMaxAge) leaves the plan's consume counted, as the tokens stayed
// consumed.
//
// Snapshots are written by the store (Store.ApplyUsage) at most
// once per record, whatever the redeliveries: see docs/usage.md.
//
// The windows are pure; an Aggregator is safe for concurrent
// use if its Writer and Observer are.
//
// It shares the decision store's table handle (dynamo.Table) and imports
// pkg/dynamo and pkg/dynamo/item; the decision store does not import it.
package usage
