// Package demand follows, per limit of a bucket, this replica's part of
// the bucket's recent consumption, without a call and without any word
// between replicas: what this replica debited on it, over what the whole
// fleet did as the item's running consumption counter
// (item.LimitImage.Consumed) showed in the images DynamoDB returned to it.
//
// Both are sums weighted by age, what happened 5 s ago weighing 1/e, so
// that about the last 5 s count; their ratio changes only when something
// is seen, and stays what it was while nothing is (an outage). A part is
// known once its images span a second. A replica that sees an item's
// counter rarely sees what the fleet consumed in between all at once, in
// the same image as its own debit: its part stays its part. What this
// replica debited by a write whose image was the first it had of a shard
// is in that image's count and is not counted again, so a part errs low,
// never high, there; so do consumption counted for a refused plan's
// parts, given back, and a write whose answer was lost (counted by the
// fleet's counter, not as this replica's).
//
// The DynamoDB store keeps one Table (dynamo.Store.Demand);
// ON_UNAVAILABLE=local sizes a degraded item's local bucket by it
// (internal/degrade).
//
// Asks measures something else: what this replica asks of a bucket
// (admitted or not) as a share of its limits' refill, over windows of
// AskWindow. The store fixes a hot sharded bucket's home shards only
// where what the replicas ask runs every shard dry (pkg/dynamo's pace.go).
package demand
