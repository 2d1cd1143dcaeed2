// Package tokenbucket holds the exact token-bucket arithmetic that every
// store shares.
//
// Tokens are counted in millitokens (1 token = 1000 millitokens) as int64, and
// time is an int64 count of unix milliseconds passed in by the caller: the
// package never reads the clock, performs no I/O and keeps no state. A bucket's
// state is a plain value (State) that a store loads, transforms with a Limit's
// methods and writes back under whatever lock or condition it uses.
//
// Invariants, for every sequence of calls:
//   - refill is lazy: add = ⌊elapsed·RefillAmount/RefillPeriod⌋, and the refill
//     clock advances only by the time that bought those whole millitokens, so
//     repeated calls within one millisecond never credit twice and no elapsed
//     time is ever credited twice;
//   - a clock that goes backwards counts as zero elapsed time;
//   - refill and refunds never lift a bucket above its capacity;
//   - forced consumption (post-hoc charges) may drive a bucket into debt, which
//     refill repays; debt saturates at MinMillitokens instead of overflowing,
//     and a stored state below it is read as MinMillitokens;
//   - waits are never too early: TryConsume(n) at nowMs + RetryAfter(n)
//     succeeds for any n up to the capacity, and TimeToFull is exact; waits
//     longer than any time.Duration saturate at the largest Duration;
//   - no intermediate product overflows: products are taken in 128 bits, so any
//     period up to a year (and beyond) and any rate up to MaxMillitokens is exact.
//
// All functions are safe for concurrent use: they only read their arguments.
package tokenbucket
