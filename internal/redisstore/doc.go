// Package redisstore is the Redis store (BACKEND_TYPE=redis): a fleet's
// bucket levels in the Redis its operators already run, decided with the
// same exact token buckets as the other stores.
//
// # One call per batch of plans
//
// Every decision runs in Redis, in one call of one server-side script
// (decide.lua, sent by its SHA): it reads the levels of every limit of the
// plans it is given, decides each plan at Redis's own clock (TIME: the
// replicas' clocks do not matter) with the integer GCRA of
// pkg/tokenbucket, in millitokens and 128-bit levels, and writes a plan's
// levels only if it is admitted (charges and refunds are applied
// regardless), all or nothing. The plans waiting on one item share a call
// (lanes): while a call for a key is in flight, the plans that arrive for
// it wait and go together in the next one.
//
// The script answers the levels each plan saw and the clock it decided
// at; this package runs cascade.Decide again on them to tell every status
// (remaining, retry-after, reset), so a status is computed by one piece of
// Go, and a script whose admission differs from it is a reported error,
// never an answer.
//
// Redis's CPU is what a fleet's hot key is bounded by, so the script is
// kept cheap: a call's distinct debits are sent and parsed once, however
// many of its plans repeat them; levels are held as pairs of doubles
// (h·10^14 + l, exact on doubles) and as base-10^7 limbs only past about
// 10^29; the reply is one flat array, a level in it two integers.
//
// # Keys
//
// A bucket item is one hash: per limit, its level and the limit it was
// written under (a level is restated when the limit changes, as on the
// other stores). Its key starts with Prefix and the namespace, then its
// hash tag (a hash of its namespace and entity, on a cluster of its chain's
// root: its cluster slot, shared by a hierarchy's levels) and its entity
// and resource, each part escaped and length-prefixed, so that no
// descriptor value can forge or collide with another key. A hash expires
// once every limit on it would be full again.
//
// # Stored limits and entities
//
// As on DynamoDB, limits stored at a scope (entity and resource, entity,
// resource, system; a hash per scope, each field a limit's name and its
// shape) override the plan's own, most specific first: Acquire replaces
// each debit's limit before the plan goes to the script, from a
// per-replica cache of Config.ConfigCacheTTL, one pipelined read of every
// record a plan lacks. Entity records (a hash per entity: parent, cascade
// flag, creation; a set of children per parent) give Ancestors, the stored
// chain a cascading rule charges. An entity's records carry its own hash
// tag (its buckets' too, but on a cluster below a chain's root). The operator's writes add audit records (Record): a capped
// list per entity, resource and the system.
//
// # Namespaces
//
// Every key of a namespace starts with Prefix and its length-prefixed
// name. The registry (Namespaces) is one hash of no namespace, its key
// named without a length prefix: each namespace's record, its state
// (active, deleted, purged) changed by conditional writes. Orphans and
// Purge find a namespace's keys by SCAN on every master, and Purge
// UNLINKs them a page at a time, one command per slot on a cluster. A
// Split's registry is Main's; its orphans and purges cover both stores.
//
// # Failures
//
// Every call has a deadline (Config.Timeout) that covers the wait for a
// connection, the write and the read, and at most Config.MaxInFlight calls
// are in flight; a lane holds at most maxQueue plans. A call that fails
// fails its plans with an error wrapping ErrUnavailable (and
// cascade.ErrMayHaveLanded when it may have run): the service applies
// ON_UNAVAILABLE. Never is an error an admission.
package redisstore
