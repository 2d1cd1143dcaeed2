// Package memstore is the embedded, in-memory store: the default when one
// machine is enough. It decides plans exactly as cascade.Decide does, with
// the same behaviour as the DynamoDB store (internal/storetest holds both to
// one conformance suite).
//
// Layout: every bucket limit — a (cascade.Key, limit name) pair — is an
// entry holding its tokenbucket.State (the GCRA level: refill is implicit
// in the clock, nothing is rounded) and the Limit it was last written with,
// behind a lock of its own. Entries are spread over a power-of-two number of
// shards by a seeded hash/maphash of the key; a shard is a map and a list of
// its entries, oldest first, behind a lock held only to look up, insert or
// drop an entry, never while a plan is decided.
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
// per bucket, Stats.Bytes' accounting). A new bucket in a shard at a bound
// examines at most evictScan of the shard's oldest entries: it drops those
// that are full again and gives the others (in use, or holding less than
// full) a second chance at the newest end, so an insert costs O(1) and
// successive inserts look at different entries. A bucket holding less than
// full is never dropped: when no room is made, the plan is still decided on
// the new bucket as full, and if it would have to store it, Acquire returns
// ErrFull and stores nothing (the service answers with its ON_UNAVAILABLE
// policy) rather than forget consumption and over-admit. A key larger than
// a shard's byte bound is never stored. Existing keys are unaffected by a
// full table.
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
