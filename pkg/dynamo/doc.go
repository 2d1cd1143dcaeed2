// Package dynamo is the DynamoDB store: every replica of the service shares
// one table (DESIGN §6).
//
// # Keys
//
// One table, namespaced keys. Every user-supplied component (namespace,
// entity, resource, limit name) is escaped: only [A-Za-z0-9._-] survive,
// every other byte becomes %XX, and a component longer than 400 bytes
// escaped is stored as "~" + SHA-256, so no value can forge a separator,
// parse into another key or collide with one. Namespaces are prefixed with
// "n" ("n{ns}/…"); the table's own records live under "_/SYSTEM#".
//
//	bucket           n{ns}/BUCKET#{entity}#{resource}#{shard}   #STATE
//	entity           n{ns}/ENTITY#{id}                          #META
//	entity config    n{ns}/ENTITY#{id}                          #CONFIG#{resource} | #CONFIG (default)
//	resource config  n{ns}/RESOURCE#{resource}                  #CONFIG
//	system config    n{ns}/SYSTEM#                              #CONFIG
//	audit            n{ns}/AUDIT#{entity}                       #AUDIT#{ulid}
//	version          _/SYSTEM#                                  #VERSION
//	namespaces       _/SYSTEM#                                  #NAMESPACE#{name}, #NSID#{id}
//
// GSI1 parent → children (entity records), GSI2 resource → buckets, GSI3
// (KEYS_ONLY) entity → configs and buckets, GSI4 (KEYS_ONLY) namespace →
// everything. Expressions use placeholders only (#a0, :v0): attribute
// names built from limit names never appear in expression text.
//
// # Bucket items
//
// Flat attributes per limit: b_{limit}_tk (millitokens), _cp, _ra, _rp
// (shape last written, ms), _tc (consumed total, for the aggregator's
// deltas) and _lr, the limit's own last-refill time in unix ms. The shared
// rf is the time of the last write that credited refill; shard_count,
// cascade, parent_id, ttl and the hidden limit wcu_* (1000 writes/s per
// item) complete the item. Per-limit lr keeps tokenbucket's residue (the
// drift compensation) exact for every limit of an item.
//
// # Decisions
//
// A decision guesses from the last image this replica saw of each item (a
// cold item is read first, in the same consistent BatchGetItem as its
// uncached config records), runs cascade.Decide on it, and sends one
// conditional UpdateItem per item whose condition bounds b_{limit}_tk to the
// range where that decision is the one cascade.Decide would take on whatever
// the item holds when the write lands (see sym.go), locked on _lr only when
// the write moves it. The write refills in place, so a warm replica decides
// in one write and no read, without an aggregator's refill-ahead. A failed
// condition returns the old image (ALL_OLD), which decides the next attempt:
// missing item → create (attribute_not_exists); wcu exhausted → double the
// shard count; refill would satisfy → write with refill; otherwise refuse
// with the exact retry-after. A refusal is only ever returned on an image
// read during the decision (never on a cached one), and a refused decision
// with nothing to charge writes nothing (lazy refill: the next write credits
// it). Several items: parallel writes, compensated with unconditional ADDs
// when one fails, then TransactWriteItems (at most 100 items).
//
// Contention: within a replica, decisions on one item are serialised
// (striped locks, waiting at most Timeout/3), so the next decision guesses
// from the last one's ALL_NEW. After two lost races a decision consumes
// without crediting refill when the outcome is the same (no lock on _lr,
// so consumers never conflict with each other); after 24 lost races for
// tokens the winners took it is refused (retry after 1 ms). Neither ever
// admits more than cascade.Decide would.
//
// # Sharding
//
// When an item's wcu runs out (10 s of burst, then 1000 writes/s), one
// transaction sets shard_count to 2N on every shard 0..N−1 (shard 0 is the
// truth) and creates shards N..2N−1 empty, at most once per decision and up
// to MaxShards. Every write conditions on the item's shard_count and works
// on its share cp/N, ra/N, so a replica with a stale count cannot
// over-credit, and tokens above a shrunk share are clamped, never consumed
// (conservative: a doubling can forfeit part of the remaining burst). A
// refused shard retries on up to two others. Status and Adjust work on one
// shard chosen at random; Status reports its share times N.
//
// # Failures
//
// A decision has one budget of Config.Timeout, and every call its own
// deadline within it. Errors are classified once, where they leave the SDK,
// into ErrUnavailable, ErrThrottled or ErrConflict. Recent refusals of
// consuming plans are answered from a bounded local cache until their
// retry-after (at most one second: refunds can return tokens sooner).
//
// A Store is safe for concurrent use and owns no goroutines.
package dynamo
