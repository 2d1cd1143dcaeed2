package tokenbucket

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"time"
)

// Millitokens is an amount of tokens in thousandths of a token.
type Millitokens int64

// PerToken is the number of millitokens in one token.
const PerToken Millitokens = 1000

// MaxMillitokens bounds capacities, refill amounts and single charges
// (about 1.15·10^15 tokens).
const MaxMillitokens Millitokens = 1 << 60

// MinMillitokens is the floor at which debt saturates.
const MinMillitokens Millitokens = -(1 << 62)

// Errors returned by NewLimit.
var (
	ErrCapacity = errors.New("tokenbucket: capacity must be between 1 millitoken and MaxMillitokens")
	ErrRefill   = errors.New("tokenbucket: refill amount must be between 1 millitoken and MaxMillitokens")
	ErrPeriod   = errors.New("tokenbucket: refill period must be a positive whole number of milliseconds")
)

// Limit describes one bucket: it holds at most Capacity and gains
// RefillAmount every RefillPeriod, continuously, to the millitoken.
//
// The zero Limit is invalid; build limits with NewLimit or Rate.
type Limit struct {
	Capacity     Millitokens
	RefillAmount Millitokens
	RefillPeriod time.Duration
}

// NewLimit validates and returns a Limit.
func NewLimit(capacity, refillAmount Millitokens, refillPeriod time.Duration) (Limit, error) {
	switch {
	case capacity < 1 || capacity > MaxMillitokens:
		return Limit{}, ErrCapacity
	case refillAmount < 1 || refillAmount > MaxMillitokens:
		return Limit{}, ErrRefill
	case refillPeriod < time.Millisecond || refillPeriod%time.Millisecond != 0:
		return Limit{}, ErrPeriod
	}
	return Limit{Capacity: capacity, RefillAmount: refillAmount, RefillPeriod: refillPeriod}, nil
}

// Rate returns the limit for "requests per period" with an optional burst: the
// bucket refills requests tokens every period and holds max(requests, burst)
// tokens, so a full bucket admits burst requests at once and then the
// sustained rate.
func Rate(requests uint64, period time.Duration, burst uint64) (Limit, error) {
	const maxTokens = uint64(MaxMillitokens / PerToken)
	if requests == 0 || requests > maxTokens {
		return Limit{}, fmt.Errorf("tokenbucket: requests per period must be between 1 and %d, got %d", maxTokens, requests)
	}
	if burst > maxTokens {
		return Limit{}, fmt.Errorf("tokenbucket: burst must be at most %d, got %d", maxTokens, burst)
	}
	capacity := max(requests, burst)
	return NewLimit(Millitokens(capacity)*PerToken, Millitokens(requests)*PerToken, period)
}

// State is the persisted state of one bucket.
type State struct {
	// Tokens held after the last refill; negative while in debt.
	Tokens Millitokens
	// LastRefill is the unix millisecond up to which refill has been credited.
	LastRefill int64
}

// Full returns the state of a bucket that is full at nowMs: new buckets start
// full.
func (l Limit) Full(nowMs int64) State {
	return State{Tokens: l.Capacity, LastRefill: nowMs}
}

func (l Limit) periodMs() int64 { return int64(l.RefillPeriod / time.Millisecond) }

// Refill credits the time elapsed since s.LastRefill. It credits
// ⌊elapsed·RefillAmount/RefillPeriod⌋ and advances LastRefill by the least
// time that buys those millitokens, so the remainder carries to the next call.
// A full bucket's clock moves to nowMs (a full bucket banks no time); a bucket
// above capacity (its limit was lowered) is clamped to capacity, and one in
// debt below MinMillitokens (a corrupt stored value) is raised to that floor.
func (l Limit) Refill(s State, nowMs int64) State {
	s.Tokens = max(s.Tokens, MinMillitokens) // keeps Capacity − Tokens inside int64
	if s.Tokens >= l.Capacity {
		return State{Tokens: l.Capacity, LastRefill: max(s.LastRefill, nowMs)}
	}
	if nowMs <= s.LastRefill {
		return s // the clock went backwards or stood still: nothing elapsed
	}
	missing := int64(l.Capacity - s.Tokens)
	add := int64(l.Credit(s.LastRefill, nowMs))
	if add >= missing {
		return State{Tokens: l.Capacity, LastRefill: nowMs}
	}
	if add == 0 {
		return s
	}
	used := l.CreditTime(Millitokens(add))
	return State{Tokens: s.Tokens + Millitokens(add), LastRefill: s.LastRefill + used}
}

// TryConsume refills s and debits n if the bucket then holds at least n.
// On refusal nothing is debited and the refilled state is returned with false.
// A negative n is treated as zero.
func (l Limit) TryConsume(s State, n Millitokens, nowMs int64) (State, bool) {
	s = l.Refill(s, nowMs)
	n = max(n, 0)
	if s.Tokens < n {
		return s, false
	}
	s.Tokens -= n
	return s, true
}

// ForceConsume refills s and debits n even past zero: the bucket goes into
// debt that refill repays. It reports cost already spent (post-hoc charges).
func (l Limit) ForceConsume(s State, n Millitokens, nowMs int64) State {
	s = l.Refill(s, nowMs)
	s.Tokens = subSat(s.Tokens, max(n, 0))
	return s
}

// Refund refills s and credits n, never above capacity.
func (l Limit) Refund(s State, n Millitokens, nowMs int64) State {
	s = l.Refill(s, nowMs)
	n = max(n, 0)
	if n >= l.Capacity-s.Tokens {
		s.Tokens = l.Capacity
		s.LastRefill = max(s.LastRefill, nowMs)
		return s
	}
	s.Tokens += n
	return s
}

// Check reports whether the bucket holds any tokens at nowMs (more than zero
// millitokens): the answer to a check-only request with zero hits.
func (l Limit) Check(s State, nowMs int64) bool {
	return l.Refill(s, nowMs).Tokens > 0
}

// Available returns the whole tokens the bucket holds at nowMs, rounded
// toward −∞ (a bucket in debt reports a negative count).
func (l Limit) Available(s State, nowMs int64) int64 {
	return floorDiv(int64(l.Refill(s, nowMs).Tokens), int64(PerToken))
}

// RetryAfter returns how long a caller wanting n millitokens must wait:
// zero when the bucket already holds n at nowMs, else
// (⌊deficit·RefillPeriod/RefillAmount⌋ + 1) ms, which is never too early.
// When the bucket's refill clock is ahead of nowMs (another writer's clock
// runs ahead), nothing accrues until nowMs reaches it, so that lead is added.
// A request larger than the capacity can never succeed; its wait is the time
// to fill the whole deficit all the same, and the caller decides what to do.
// A negative n is treated as zero, as TryConsume does. A wait longer than any
// time.Duration saturates at the largest Duration.
func (l Limit) RetryAfter(s State, n Millitokens, nowMs int64) time.Duration {
	s = l.Refill(s, nowMs)
	n = min(max(n, 0), MaxMillitokens) // as TryConsume; keeps n − Tokens inside int64
	if n <= s.Tokens {
		return 0
	}
	deficit := int64(n - s.Tokens)
	ms := addSat(mulDiv(deficit, l.periodMs(), int64(l.RefillAmount)), 1)
	if s.LastRefill > nowMs {
		// The difference is positive, so exact in uint64 even beyond int64.
		ms = addSat(ms, int64(min(uint64(s.LastRefill)-uint64(nowMs), math.MaxInt64)))
	}
	return durationMs(ms)
}

// TimeToFull returns how long until the bucket is full again at nowMs
// (zero when it is full): Envoy's duration_until_reset.
func (l Limit) TimeToFull(s State, nowMs int64) time.Duration {
	s = l.Refill(s, nowMs)
	missing := int64(l.Capacity - s.Tokens)
	if missing <= 0 {
		return 0
	}
	fullAt := addSat(s.LastRefill, ceilMulDiv(missing, l.periodMs(), int64(l.RefillAmount)))
	if fullAt <= nowMs {
		return 0
	}
	// fullAt > nowMs, so the difference is exact in uint64 even when it
	// exceeds int64 (a stored refill clock far ahead of nowMs).
	return durationMs(int64(min(uint64(fullAt)-uint64(nowMs), math.MaxInt64)))
}

// Credit returns what refill buys from fromMs to toMs:
// ⌊(toMs−fromMs)·RefillAmount/RefillPeriod⌋ millitokens, zero when toMs ≤
// fromMs, saturating at MaxInt64. The span is taken exactly even when it
// exceeds MaxInt64 milliseconds. Refill credits this, up to capacity.
func (l Limit) Credit(fromMs, toMs int64) Millitokens {
	if toMs <= fromMs {
		return 0
	}
	return Millitokens(mulDivU(uint64(toMs)-uint64(fromMs), uint64(l.RefillAmount), uint64(l.periodMs())))
}

// CreditTime returns the least time in milliseconds that buys n millitokens:
// ⌈n·RefillPeriod/RefillAmount⌉, saturating at MaxInt64 and zero for n ≤ 0.
// Refill advances LastRefill by this much, never more than elapsed.
func (l Limit) CreditTime(n Millitokens) int64 {
	if n <= 0 {
		return 0
	}
	return ceilMulDiv(int64(n), l.periodMs(), int64(l.RefillAmount))
}

// mulDiv returns ⌊a·b/c⌋ for a, b ≥ 0 and c > 0, saturating at MaxInt64.
func mulDiv(a, b, c int64) int64 {
	return mulDivU(uint64(a), uint64(b), uint64(c))
}

// mulDivU returns ⌊a·b/c⌋ for c > 0, saturating at MaxInt64.
func mulDivU(a, b, c uint64) int64 {
	hi, lo := bits.Mul64(a, b)
	if hi >= c {
		return math.MaxInt64
	}
	q, _ := bits.Div64(hi, lo, c)
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(q)
}

// ceilMulDiv returns ⌈a·b/c⌉ for a, b ≥ 0 and c > 0, saturating at MaxInt64.
func ceilMulDiv(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return math.MaxInt64
	}
	q, r := bits.Div64(hi, lo, uint64(c))
	if r != 0 {
		q++
	}
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(q)
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

func subSat(a, n Millitokens) Millitokens {
	if a-MinMillitokens <= n { // a - n would fall below the floor
		return MinMillitokens
	}
	return a - n
}

func addSat(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

func durationMs(ms int64) time.Duration {
	if ms > math.MaxInt64/int64(time.Millisecond) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(ms) * time.Millisecond
}
