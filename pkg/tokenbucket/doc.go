// Package tokenbucket holds the exact token-bucket arithmetic that every
// store shares.
//
// Amounts are millitokens (1 token = 1000 millitokens) and time is an int64
// count of unix milliseconds passed in by the caller: the package never reads
// the clock, performs no I/O and keeps no state.
//
// # State: one number that writers can change without reading it
//
// A bucket's stored state is its level X (State), in the GCRA family: at
// time t the bucket holds min(Capacity, (t·RefillAmount − X)/RefillPeriod).
// Refill is implicit in the clock, so nothing is ever rounded and no amount
// of saving, polling or splitting time loses or creates a fraction of a
// token. Consuming n adds n·RefillPeriod to X when the bucket holds n, so
// concurrent consumers commute; a level below Full(t) is a full bucket
// (capacity reached) and is clamped to Full(t) by the next write.
//
// Decisions run on a Level: the value computed from what a store believes is
// stored, the write that produces it (an ADD, or a SET once a clamp made the
// result independent of the stored value), and the range of stored levels
// for which every comparison made comes out the same. A store under a lock
// uses the value; a store with conditional writes (DynamoDB) sends "if the
// stored level is in range, apply the write", which succeeds exactly when
// the decision is the one it would make on the stored level.
//
// # Range
//
// Levels are 128-bit (Int128). With capacities and refill amounts up to
// MaxMillitokens (2^60), periods up to MaxPeriod (100 years, about 2^41.5
// ms) and clocks anywhere in int64 milliseconds, t·RefillAmount < 2^123 and
// n·RefillPeriod < 2^102, so no operation wraps; for a clock within this
// millennium and rates up to 10^12 tokens per second, levels stay below
// 10^31, inside DynamoDB's 38 significant digits. Reported amounts
// (Tokens, waits) saturate instead of overflowing.
//
// Invariants, for every sequence of operations:
//   - a bucket never holds more than its capacity, and refunds never lift it
//     above capacity;
//   - a refused TryConsume changes nothing; a clock that goes backwards
//     credits nothing;
//   - charges may drive a bucket into debt, which refill repays;
//   - waits are exact: TryConsume(n) at nowMs + RetryAfter(n) succeeds for
//     any n up to the capacity, and not a millisecond earlier (absent other
//     traffic); TimeToFull is exact.
//
// All functions are safe for concurrent use: they only read their arguments.
package tokenbucket
