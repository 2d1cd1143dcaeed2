// Package storetest is the one conformance suite that every store runs: the
// embedded store (internal/memstore) and the DynamoDB store (pkg/dynamo, on a
// fake client and on DynamoDB Local). A store passes when it decides every
// plan exactly as cascade.Decide does over its persisted bucket levels. The
// Reference store is the one model of that: tests that need to compare a
// store's decisions with the right ones use it.
//
// Run holds a store to every behaviour on a fixed, settable Clock: new
// buckets start full; exhaustion and refusal with exact RetryAfter
// (deficit·RefillPeriod/RefillAmount, rounded up to the millisecond) and
// ResetAfter; refill without rounding (fractions of a millitoken are kept
// however often a bucket is read) and nothing credited when the clock goes
// backwards; all-or-nothing plans; the same bucket limit twice in one plan;
// several named limits on one bucket item; checks, charges (debt), refunds
// (capped at capacity); advisory and quota roles; keys that differ in one
// field only, whatever bytes they hold; a limit whose capacity or rate
// changes (the bucket keeps its tokens); statuses one per debit, in order.
// It also runs the exactness tests: 100/min asked every millisecond for ten
// minutes admits exactly 1,100; over random limits and random ways to split
// time, the tokens admitted are within one token of capacity + refill·t and
// never above; a drained 1,000-a-month bucket idle for 8 days admits 266.
// WithMaxCalls scales the long ones down for stores whose calls are slow.
//
// RunConcurrency runs the same store on the real clock under many
// goroutines, across one or several instances that share state, and checks
// that no more is admitted than the bucket refills and that multi-bucket
// plans neither deadlock nor lose a millitoken.
//
// RunSettle holds a store that settles (Settler, cascade.Settlement) to the
// settlement contract, each answer equal to the Reference's: a charge runs
// into debt, a refund stops at capacity, an ID settles once (a later
// Settle of it is a duplicate and changes nothing, an empty settlement
// records its ID), an invalid settlement is an error wrapping
// cascade.ErrSettlement and records nothing, every level of a chain moves
// alike, and random settlements among random decisions agree with the
// Reference. RunSettleConcurrency settles one ID from 16 goroutines at once
// (applied exactly once) and interleaves settlements, each sent twice,
// with consumes on one bucket (conserved exactly).
//
// Units: amounts are tokenbucket.Millitokens, times time.Time at the API and
// unix milliseconds in the stores. The suite imports only pkg/cascade and
// pkg/tokenbucket, so any store package can call it from its tests.
//
// Concurrency: Clock and Reference are safe for concurrent use. Run's
// subtests run one after another; each gets a fresh store from the Factory
// and a Clock of its own.
package storetest
