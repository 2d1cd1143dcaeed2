// Package dynamo is the DynamoDB store: every replica of the service shares
// one table, whose key layout, item attributes and costs docs/dynamodb.md
// describes for operators.
//
// # Rooms
//
// The store is four packages, by job, each reaching the table through one
// handle (Table: the client, the table's name, the namespace, the budget
// of a call, the clock, error classification, who the audit records name):
//
//   - pkg/dynamo/item: the table's schema: keys, the codec of bucket items
//     and of stored limits, update and condition expressions. It imports no
//     other room.
//   - pkg/dynamo (this package): the decision engine: Store, its lanes,
//     batches, shared reads, caches, give-backs, shards, lease
//     settlement, the fleet's heartbeat, and the reads of stored
//     limits and entities on the decision path; and the hooks through
//     which the operator's room tells the store what it read and changed
//     (hooks.go, ForgetConfig, ForgetEntity, KeepEntity).
//   - pkg/dynamo/admin: the operator's writes and reads: entities, stored
//     limits, the audit log, the namespace registry and lifecycle, purges,
//     and the bucket verbs (Bucket, ResetBucket, TopUp, Status,
//     SetShards).
//   - pkg/dynamo/usage: the usage history, the stream's checkpoints and
//     lease, and the aggregator that folds stream records into snapshots.
//   - pkg/dynamo/warm: the warm-up before a service reports ready, on the
//     store's Table.
//
// Imports point down (item, then this package, then admin, usage and
// warm);
// internal/architecture holds that, and the size of each room.
//
// # Keys
//
// One table, namespaced keys. Every user-supplied component (namespace,
// entity, resource, limit name) is escaped: only [A-Za-z0-9._-] survive,
// every other byte becomes %XX, and a component longer than 64 bytes
// escaped is stored as "~" + SHA-256, so no value can forge a separator,
// parse into another key or collide with one, and keys stay short. A bucket
// item keeps the raw namespace, entity and resource once, as attributes.
// Namespaces are prefixed with "n" ("n{ns}/…"); the table's own records live
// under "_/SYSTEM#".
//
//	bucket           n{ns}/BUCKET#{entity}#{resource}#{shard}   #STATE
//	entity           n{ns}/ENTITY#{id}                          #META
//	entity config    n{ns}/ENTITY#{id}                          #CONFIG#{resource} | #CONFIG (default)
//	resource config  n{ns}/RESOURCE#{resource}                  #CONFIG
//	system config    n{ns}/SYSTEM#                              #CONFIG
//	audit            n{ns}/AUDIT#{entity}                       #AUDIT#{ulid}
//	settlement       n{ns}/LEASE#{id}                           #SETTLED
//	version          _/SYSTEM#                                  #VERSION
//	namespaces       _/SYSTEM#                                  #NAMESPACE#{name}, #NSID#{id}
//	usage snapshot   n{ns}/ENTITY#{id}                          #USAGE#{resource}#{window}
//	applied record   _/STREAM#{eventID}                         #APPLIED
//
// GSI1 (parent → children, on entity records) is the one index: no code
// path queries another. Expressions use placeholders only (#a0, :v0):
// attribute names built from limit names never appear in expression text.
//
// # Bucket items (schema 2)
//
// Flat attributes per limit: b_{limit}_x, the limit's level (see
// tokenbucket.State: at time t the bucket holds (t·ra − x)/rp, at most its
// capacity; refill is implicit in the clock), _tc (millitokens debited, for
// usage) and _l, the limit the level was written with
// ("capacity/amount/period_ms"): a changed limit keeps the bucket's tokens,
// and the item's expiry knows when every limit is full. Shared:
// shard_count, ns, entity, resource, ttl, and wt and wp, the clocks of the
// last two writers (see Clocks). An entity's place in a hierarchy
// (parent_id, cascade) is in its entity record only. An item with entity and
// resource values up to 256 bytes each stays within one write unit (1 KB). The table's schema version
// record says "2"; NewStore refuses a table of another version with
// ErrSchema (version 1 tables must be recreated).
//
// # Decisions
//
// A decision splits its plan into parts, one per bucket item, and queues
// each part in its item's lane. A lane runs one conditional UpdateItem at a
// time per item and replica, carrying every part that queued while the write
// before was in flight: cascade.Decide on each part in arrival order, each
// seeing the ones before, on the levels of the last image this replica saw.
// The write adds to each level (or sets it, when a full bucket's level is
// clamped) under the condition that the stored level lies in the range for
// which those decisions hold (tokenbucket.Level). Writers that consume
// commute: a condition fails only when the outcome would differ, and then
// DynamoDB's old image (ALL_OLD) decides the batch again, exactly, with one
// more write. A check stands only on an image DynamoDB returned during the
// batch; so does a refusal when the rejection cache is off, and otherwise,
// like the cache's answers, on an image of at most a second ago. A warm replica decides in one write and no read; a
// cold item is read first (strongly consistent, once per lane).
//
// A plan over several items is decided part by part (quota debits taken
// when they fit), then by the plan's admission rule. The parts go to their
// lanes together, but a part whose item refused within the last second
// (past the refusal's retry-after) goes first, alone: refused again, the
// plan is refused without writing the other items (gate.go); the parts of a refused
// plan that consumed are given back: the same refund, capped at capacity,
// written at most once, in their lanes, on a budget of their own
// (4×Config.Timeout), retried while it lasts.
//
// # Settlements
//
// Settle applies a cascade.Settlement (charges into debt, refunds capped
// at capacity, after the fact) at most once per ID, whichever replica and
// however often it is asked, in one TransactWriteItems: a Put of a marker
// item (n{ns}/LEASE#{id}, #SETTLED, ns the first debit's namespace; ttl
// its Expires plus an hour; nonce, random per Settle call) on the
// condition that none exists, and one Update per bucket item, built as a
// lane's write is (writeExpr: cascade.Decide on the item's image, the
// levels added to or set under the condition that the stored level lies in
// the range for which the decision holds, and the shard count it assumed).
// The items are read first, strongly consistent (a cached image of at
// most a second serves). A bucket condition that failed is decided again
// on the item DynamoDB returns (ALL_OLD); a transaction that conflicted,
// was throttled or went unanswered (a timeout, a server error: it may have
// landed) is sent again, read again, after a backoff, within a budget of
// max(4×Config.Timeout, 1 s) that the caller's cancellation does not end;
// the marker makes a retry land at most once. A marker already there is a
// duplicate, unless its nonce is this call's: an earlier attempt landed
// unanswered, and the settlement is reported applied with statuses from
// the items read again. A settlement's write sets the items' ttl as every
// bucket write does, and forgets the lane's cached images of them. Not
// ClientRequestToken: its idempotency lasts ten minutes, less than a
// lease, and a retry after a failed condition has other parameters, which
// the token refuses. Cost: 2 WCU per item of up to 1 KB, so a three-level
// chain is 8 WCU (three bucket items and the marker), plus a read of each
// item.
//
// A debit names the shard its estimate was taken from (cascade.Debit.Shard,
// the Status.Shard Acquire reported): the settlement is written there, in
// the units of the item's shard count (a shard holds 1/N of the level, so
// the amount counts N times). When that shard's item does not exist (its
// shards expired since, or the item never had that many), it is written to
// shard 0, which holds the item's shard count, and is created if it must
// be. Acquire reports in each Status the shard that decided its debit.
//
// A lane's UpdateItem that meets a transaction in flight on its item
// (TransactionConflictException) wrote nothing: the batch reads the item
// again and retries within its budget, as after a lost race.
//
// # Repayments
//
// Repay applies a cascade.Repayment, what a replica decided locally on one
// bucket item while the store did not answer, once per replica and stamp,
// and not by a transaction: a repayment is a part of the item's lane
// (repayPart, on shard 0), written by the lane's next conditional
// UpdateItem with the decisions queued beside it. The write adds its
// charges as a decision's, sets rp_{replica} (item.RepaidAttr) to the
// stamp, and conditions on the stored stamp being absent or below it. A
// batch decided on an image whose stamp for the replica already reaches
// the repayment's writes nothing of it and reports it a duplicate (an
// earlier attempt landed unanswered); a failed condition is decided again
// on what DynamoDB returned. A write drops stamps older than two hours
// (repaidKeep), on the condition that they are unchanged.
//
// # Give-backs
//
// Until its give-back lands, a refused plan holds the tokens its consuming
// parts took. A give-back that DynamoDB did not take within its budget
// (throttled, a read or a call that failed, its item too busy: nothing was
// written) is kept by the store and retried in the background, each try in
// its item's lane with a deadline of its own (4×Config.Timeout) and a
// Backoff from 50 ms to 5 s, until it lands, DynamoDB answers that the
// table is gone or the item holds what this schema cannot read (moot), or
// GiveBackMaxAge (5 minutes) has passed since the refusal. At most
// GiveBackMaxPending (4096) are kept; past that, the oldest not in flight is
// dropped. Close tries each pending give-back once more within a short
// deadline, then drops it. A give-back whose write went unanswered may have
// landed and is never written again: when it did not land, its tokens stay
// consumed until the bucket refills them. Every dropped or unanswered
// give-back only ever makes the store admit less. Observer.GaveBack counts
// how each one ended and Observer.GiveBacksPending how many wait.
//
// # Contention is not an outage
//
// Config.Timeout is the budget of a decision. A part still queued when its
// budget ends, a batch that lost races until its budget ran out, and a
// write DynamoDB kept throttling are refusals with a retry-after of
// contendedRetry (Observer.Contended): never an error, so ON_UNAVAILABLE can
// never turn contention into an admission. An error wrapping ErrUnavailable
// means DynamoDB did not answer: a transport error, a server error, or a
// call that ran out of its budget. A part already in a write waits for that
// write: a decision takes at most one write in flight ahead of it and its
// own, about twice Config.Timeout.
//
// Stored limits and entity records are read once per record whatever the
// number of decisions waiting (single flight), by a read with a deadline of
// its own that fills the cache even when the decision that started it gave
// up. A stored limit record lives 80 to 90% of Config.ConfigCacheTTL, and
// past that serves while one read refreshes it for at most a tenth of
// Config.ConfigCacheTTL, after which a decision waits for the read: a stored
// limit applies to every decision made Config.ConfigCacheTTL or more after
// it was stored. An entity record lives Config.ConfigCacheTTL ± 10% and
// serves while one read refreshes it. At most maxRunning such reads run at once; the
// records asked for meanwhile wait in one next read, started when a running
// one ends, so that a flood of new keys costs a few BatchGetItem calls of
// many keys each (a decision whose budget ends while its read is queued is
// contended, not unavailable). Recent refusals of consuming plans are answered
// from a bounded local cache until their retry-after (at most one second:
// refunds can return tokens sooner); Config.RejectionCacheSize 0 turns it
// off.
//
// # Stored hierarchies
//
// An entity record names its parent (admin.Store.PutEntity); a parent whose record
// cascades is charged the debits of its children. Ancestors walks the
// records up from a bucket's entity (its key's Entity up to the first '#';
// the rest, a hierarchical rule's branch, names every ancestor's bucket
// too) while the parents cascade, at most the bound it is given, and never
// twice through one entity. Each level is the entity record and its two
// config records (for the resource, and its default), read together by one
// BatchGetItem in a single flight and cached like stored limits; a warm
// chain makes no call. admin.Store.PutEntity refuses a parent that would make a cycle,
// a chain of more than descriptors.MaxChain entities and an id that no
// request value escapes to (descriptors.EscapeValue); a cycle written
// behind its back is cut at request time. A bucket's own stored limits are
// looked up under its entity id alike, so they apply to each branch.
//
// # Sharding
//
// When DynamoDB throttles an item's writes, the batch retries within its
// budget and doubles the item's shard count, up to MaxShards: one doubling
// at a time per bucket and replica, and none within a second of the last.
// The same doubling runs, in the background, when a bucket's writes from
// this replica reach Config.ShardWriteRate per shard within a second
// (resize.go), before DynamoDB throttles it. A doubling (double.go) is
// three rounds of conditional single-item writes, not a transaction (which
// every write landing on a hot shard would cancel): shards N..2N−1 are
// created pending (holding nothing; decisions go to the shard N below),
// shards 0..N−1 are moved to shard_count 2N, then the new shards are
// admitted, empty. Every write is conditional on the old count, so replicas
// doubling at once double once; a doubling stopped half-way is finished by
// the next replica that meets one of its pending shards after pendingGrace.
// Levels are kept in whole-bucket units and a shard of N holds 1/N
// of its level, so a doubling halves every old shard's share by itself
// (conservative: it can forfeit part of the remaining burst); every write
// conditions on the shard count it assumed. A refused shard retries on up
// to two others. admin.Store.Status works on one shard chosen at random
// and reports the whole bucket.
//
// A sharded bucket whose writes carry more than one decision is hot for a
// second (pace.go). On a hot bucket a replica paces each shard's writes
// (one start every Config.Timeout/3, gathering the decisions that arrive
// meanwhile), sends every decision to its home shard, and does not retry a
// refusal on other shards. The home is the replica's rank among the live
// replicas of the fleet record (Heartbeat) modulo the shards when they are
// at least twice as many as the shards and the replica asks enough of the
// bucket that every shard's writers, asking as it does, ask at least 1.25
// times the shard's share of the limit (so every shard runs dry), so that
// each shard keeps the same writers; else it moves on so that it has been
// every shard within half a second. A hot batch claims what its image holds less
// what the shard's other writers likely took since (the rate its writes
// found them taking, over the image's age) and half of the rest: the
// decisions the claim covers are written, with the usual condition, and
// the others are refused without a write, as refusals where the image
// stands for them (as for the rejection cache) and as contended where it
// does not. A write that lost a race on a shard other replicas write, to
// an image that no longer holds the batch's decisions, is not tried again:
// they are contended. Every admission is a conditional write. The rejection cache
// answers a hot bucket's decision only with a refusal of its home shard:
// one shard in debt does not refuse for the others. A replica whose writes
// to a hot bucket lose races within a second as often as they land (at
// least 20 times) doubles it, like a throttled one: fewer replicas share
// each shard.
//
// A sharded bucket whose writes stayed below Config.ShardMergeRate for
// Config.ShardMergeAfter, and whose shards show no recent writer, is
// halved (merge.go): one transaction, conditional on the count, every
// level and writer clock read, gives shard i the shares of shards i and
// i+N/2 (whole millitokens, rounded down) as a shard of N/2, and leaves
// shards N/2..N−1 as removed items (attrMerged, the new count, no levels).
// A replica learns a larger count from any shard and a smaller one from a
// removed shard: its write there is refused by the old count, and the
// parts go to a shard of the new count (image.gone, rehome). Observer
// ShardDoubled and ShardMerged count both.
//
// # Usage
//
// ItemUsage reads what a bucket write consumed from a stream record's
// images: the difference of each limit's _tc, which consumes of admitted
// parts and charges add to and refunds and give-backs subtract from (so a
// refused plan's consumes and their give-backs cancel). A compensation
// counts what it gives back once, in whole-bucket units, whatever the
// shard count. usage.Store.ApplyUsage adds such usage to hourly, daily and monthly
// snapshots (Window) at most once per stream record: one
// TransactWriteItems per group of records, a marker per record put on the
// condition that none exists and one ADD per snapshot item; a marker
// found there drops its record from the group, which is sent again. Usage
// reads an entity's snapshots back with one Query. docs/usage.md has the
// costs.
//
// # Expiry
//
// Every write sets ttl to the time when every limit of the item is full
// again (debt included), never less than seven days ahead: an item that
// expires is exactly a new, full bucket.
//
// # Clocks
//
// Each replica decides on its own clock, so clocks that disagree by a skew
// let the fleet admit up to skew × rate more than a limit over any
// interval (once per interval, not per period; again each time the bucket
// is full). Every bucket write records the writer's clock; a replica that
// receives an item written by a clock ahead of its own reports by how much
// (Observer.ClockBehind) and logs a warning past 100 ms. Decisions do not
// depend on it.
//
// # Calls that serve several decisions
//
// Bucket writes, cold reads and give-backs run on contexts of the store
// (its lifetime, and a deadline of their own), not a decision's: one call
// serves several decisions and outlives those that gave up. WithCallContext
// derives such a call's context from the contexts of the decisions it
// serves, the one that started it first, adding values only; WithCallJoin
// tells it of decisions that join a read already under way. The tracing
// wrapper of the service uses them to put each call in the trace of the
// decision that started it, linked to the others; the package itself
// imports no tracing library.
//
// # Operators' calls
//
// They live in pkg/dynamo/admin, on the store's table handle.
// admin.Store.Bucket reads every shard of a bucket (strongly consistent)
// and never writes. ResetBucket refills every limit on every shard, and
// TopUp credits one limit, in one TransactWriteItems with its audit
// record, each shard conditional on the shard count read; both then have
// the store forget its images of the shards (ForgetBucket). SetShards
// pre-shards a new bucket and Status reads one shard; both tell the store
// the shard count they saw (LearnBucket). Audit records name the principal
// the store was given (WithPrincipal). A namespace's registry record
// carries its lifecycle state (admin.Store.DeleteNamespace,
// RecoverNamespace: conditional updates, audited); decisions do not read
// it, the service does (admin.DeletedNamespaces, refreshed by the binary
// every Config.ConfigCacheTTL). admin.Store.Orphans and PurgeNamespace scan the
// table (there is no index by namespace) and PurgeNamespace deletes by
// BatchWriteItem: the only callers of Scan and BatchWriteItem, which the
// service never makes.
//
// A Store is safe for concurrent use; its goroutines (lane runners, reads
// that fill the caches, the retrier of pending give-backs) end by Close.
package dynamo
