// Package memstore is the embedded, in-memory store: the default when one
// machine is enough. It decides plans exactly as cascade.Decide does, with
// the same behaviour as the DynamoDB store (internal/storetest holds both to
// one conformance suite).
//
// Layout: every bucket limit — a (cascade.Key, limit name) pair — is an
// entry holding its tokenbucket.State (the GCRA level: refill is implicit
// in the clock, nothing is rounded) and the Limit it was last written with,
// behind a lock of its own. Entries are spread over a power-of-two number of
// shards by a seeded hash/maphash of the key; a shard is a map and a ring
// of its entries (the eviction CLOCK), behind a lock held only to look up,
// insert or drop an entry, never while a plan is decided.
//
// Atomicity: Acquire looks up each distinct bucket limit of its plan once
// (creating missing ones), locks their entries in ascending creation order
// (so concurrent plans over overlapping buckets cannot deadlock; an entry
// dropped before its lock was taken is looked up again), reads the clock,
// calls cascade.Decide on tokenbucket.Stored levels (tokenbucket.New(Full)
// for a new bucket), writes back the levels that changed, and unlocks. A
// plan is therefore decided all-or-nothing against a consistent snapshot of
// its buckets, holding no lock that another key needs, in time linear in
// its size (plus a sort of its distinct buckets). A refused plan without
// charges or refunds writes nothing. A bucket whose limit changed (a
// reloaded config) keeps what it holds, in whole millitokens, and is
// restated under the new limit.
//
// Memory: a bucket that is full again holds no information (a new bucket
// starts full), so it may be dropped without changing any decision. A new
// bucket that is still full after its plan (a check, a refused plan) is
// not kept. Run's sweeper drops full buckets every sweep interval, a batch
// at a time. Two bounds apply per shard: WithMaxBuckets (⌈max/shards⌉
// buckets) and WithMaxBytes (⌊max/shards⌋ bytes of keys plus entryOverhead
// per bucket, Stats.Bytes' accounting). A key larger than a shard's byte
// bound is an invalid debit (cascade.ErrInvalid).
//
// Eviction: a shard's ring is a CLOCK. A plan that decides on a stored
// bucket counts it used (up to maxUsed). A new bucket in a shard at a bound
// moves the eviction hand over at most evictScan entries (new entries go
// just behind the hand): it drops those full again, skips those a plan
// holds, and counts the others' use down by one. If that made no room, it
// drops, of those, the ones whose count was zero, then the others, each
// group by least time-to-full (the bucket nearest to full forgives the
// least), until the new bucket fits. So an insert costs O(1), a flood of
// keys used once evicts its own buckets before the ones in use, and a
// store at its bound keeps deciding: memory is never a reason to refuse a
// plan. The new bucket is then an entry like any other, so concurrent
// plans on it are decided one after the other, exactly. A plan that cannot
// lower a new bucket (checks, refunds) evicts nothing that holds less than
// full for it: the bucket is decided on as full and not kept. (One that
// could but was refused does not keep it either, and may have evicted
// another.) If no room can be made (every entry the hand reached is held
// by a plan: a bound smaller than the plans in flight), the plan is
// decided on the new bucket as full and its level, if lowered, forgotten
// at once — an eviction like the others.
//
// What an eviction costs: a dropped bucket that held less than full comes
// back full, so it can admit what it lacked of full when it was dropped
// (its deficit, debt included) once more than the limit allows — at most
// that, once per eviction; nothing else changes. Stats counts evictions of
// full and not-full buckets and adds up the deficits forgiven.
//
// Settlements: Settle applies a cascade.Settlement (charges into debt,
// refunds capped at capacity, after the fact) as a plan of advisory debits
// through the same path as Acquire — its buckets locked in sequence order,
// cascade.Decide, the levels written back — so it is atomic with every
// Acquire and Settle on those buckets, and never refused. Its ID is
// remembered, in one of as many ID shards as bucket shards (by a seeded
// hash of the ID, each behind its own lock, held from the duplicate check
// until the ID is recorded: concurrent Settles of one ID apply it once),
// until its Expires plus a minute (a lease checked just before it expired
// may arrive just after). Expired IDs are dropped by the next Settle in
// their shard, soonest first from a heap: O(log n) amortized, so the store
// holds the IDs settled within their lifetime, and at most MaxSettlements
// (⌈MaxSettlements/shards⌉ a shard, about 100 bytes each); past that a new
// ID is refused with ErrTooManySettlements until some expire. Settle
// reports shard 0 (the store has no shards of a bucket); a settled bucket
// is evicted like any other, forgiving what it lacked of full.
//
// Inspection: Inspect reads what a bucket holds of each limit without
// consuming or writing, and Reset refills each limit a bucket holds a
// level of to its capacity, each under the level's lock (the admin API's
// bucket show and reset on the embedded store). Both pass over every
// shard's map to find a bucket's limits: an operator's call, not a
// decision's.
//
// One case is not exact: if the clock steps back after a full bucket was
// dropped, the new bucket is full at the earlier time, while the dropped one
// would have held up to (step × refill rate) less.
//
// Units: millitokens for amounts; time is read from the clock given by
// WithClock (time.Now by default) and used as unix milliseconds.
//
// Concurrency: a Store is safe for concurrent use. Run starts no goroutine
// of its own and returns when its context ends.
package memstore
