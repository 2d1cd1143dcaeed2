// Package memstore is the embedded, in-memory store: the default when one
// machine is enough. It decides plans exactly as cascade.Decide does, with
// the same behaviour as the DynamoDB store (internal/storetest holds both to
// one conformance suite).
//
// Layout: every bucket limit — a (cascade.Key, limit name) pair — has one
// entry holding its tokenbucket.State and the last Limit it was used with.
// Entries are spread over a power-of-two number of shards by a seeded
// hash/maphash of the key; each shard is a sync.Mutex and a map.
//
// Atomicity: Acquire locks every distinct shard its plan touches, in
// ascending shard order (so concurrent plans over overlapping buckets cannot
// deadlock), loads each distinct bucket limit (a missing one is full: new
// buckets start full), calls cascade.Decide, writes the states back, and
// unlocks. A plan is therefore decided all-or-nothing against a consistent
// snapshot of its buckets.
//
// Memory: a bucket that would be full again holds no information (a new
// bucket starts full), so it may be dropped at any time without changing any
// decision. Run's sweeper drops such buckets every sweep interval, and an
// insert into a shard at its bound first drops the shard's full buckets. The
// bound is WithMaxBuckets spread evenly over the shards (each holds at most
// ⌈max/shards⌉). When a shard is at its bound and none of its buckets is
// full, Acquire returns ErrFull rather than reset a bucket that still
// remembers consumption (which would over-admit); the service answers such
// errors with its ON_UNAVAILABLE policy. A bucket that is still full after a
// decision (a check, a refused plan on a new key) is not stored at all.
// "Full" means full with its refill clock not ahead of now: that state is
// exactly Limit.Full(now). One case is not exact: if the clock steps back
// after a full bucket was dropped, the new bucket's refill clock starts at
// the earlier time, so it may refill up to (step × refill rate) sooner than
// the dropped one would have.
// Stats.Bytes estimates the memory held: key strings plus a fixed per-entry
// overhead.
//
// Units: millitokens for amounts; time is read from the clock given by
// WithClock (time.Now by default) and used as unix milliseconds.
//
// Concurrency: a Store is safe for concurrent use. Run starts no goroutine
// of its own and returns when its context ends.
package memstore
