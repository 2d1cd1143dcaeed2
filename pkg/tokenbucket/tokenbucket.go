package tokenbucket

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Millitokens is an amount of tokens in thousandths of a token.
type Millitokens int64

// PerToken is the number of millitokens in one token.
const PerToken Millitokens = 1000

// MaxMillitokens bounds capacities, refill amounts and single charges
// (about 1.15·10^15 tokens).
const MaxMillitokens Millitokens = 1 << 60

// MinMillitokens is the floor at which reported debt saturates.
const MinMillitokens Millitokens = -(1 << 62)

// MaxPeriod bounds refill periods: 100 years.
const MaxPeriod = 100 * 365 * 24 * time.Hour

// Errors returned by NewLimit.
var (
	ErrCapacity = errors.New("tokenbucket: capacity must be between 1 millitoken and MaxMillitokens")
	ErrRefill   = errors.New("tokenbucket: refill amount must be between 1 millitoken and MaxMillitokens")
	ErrPeriod   = errors.New("tokenbucket: refill period must be a whole number of milliseconds between 1 ms and MaxPeriod")
	ErrBudget   = errors.New("tokenbucket: a calendar budget is built by Budget")
)

// Limit describes one bucket: it holds at most Capacity and gains
// RefillAmount every RefillPeriod, continuously and exactly.
//
// The zero Limit is invalid; build limits with NewLimit or Rate.
type Limit struct {
	Capacity     Millitokens
	RefillAmount Millitokens
	RefillPeriod time.Duration
	// Calendar, when set, makes the limit a calendar budget (see Budget):
	// its clock counts the calendar's periods instead of milliseconds.
	Calendar Calendar
}

// NewLimit validates and returns a Limit.
func NewLimit(capacity, refillAmount Millitokens, refillPeriod time.Duration) (Limit, error) {
	l := Limit{Capacity: capacity, RefillAmount: refillAmount, RefillPeriod: refillPeriod}
	if err := l.Validate(); err != nil {
		return Limit{}, err
	}
	return l, nil
}

// Validate reports why l is not a valid limit, or nil.
func (l Limit) Validate() error {
	switch {
	case l.Capacity < 1 || l.Capacity > MaxMillitokens:
		return ErrCapacity
	case l.RefillAmount < 1 || l.RefillAmount > MaxMillitokens:
		return ErrRefill
	case l.RefillPeriod < time.Millisecond || l.RefillPeriod > MaxPeriod || l.RefillPeriod%time.Millisecond != 0:
		return ErrPeriod
	case !l.Calendar.IsZero() && (l.RefillPeriod != time.Millisecond || (l.RefillAmount != l.Capacity && l.RefillAmount != MaxMillitokens)):
		return ErrBudget
	}
	return nil
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

// State is the stored state of one bucket: its level X, in
// millitoken·milliseconds. At unix millisecond t the bucket holds
//
//	tokens(t) = min(Capacity, (t·RefillAmount − X) / RefillPeriod)
//
// millitokens, exactly (a rational number; nothing is rounded). Refill is
// implicit in the clock, so time passing never changes X: consuming n adds
// n·RefillPeriod to X, and writers that consume concurrently commute. A level
// below Full(t) is a full bucket; writers clamp it when they change it.
type State struct {
	X Int128
}

func (l Limit) periodMs() int64 { return int64(l.RefillPeriod / time.Millisecond) }

// at is t·RefillAmount: the level of a bucket that is empty at t (t in
// the limit's clock).
func (l Limit) at(nowMs int64) Int128 { return Mul(l.clock(nowMs), int64(l.RefillAmount)) }

// clock is the limit's time at unix millisecond nowMs: nowMs itself, or
// for a calendar budget the index of the period holding it.
func (l Limit) clock(nowMs int64) int64 {
	if l.Calendar.IsZero() {
		return nowMs
	}
	return l.Calendar.Index(nowMs)
}

// span is n·RefillPeriod: what n millitokens add to a level.
func (l Limit) span(n Millitokens) Int128 { return Mul(int64(n), l.periodMs()) }

// base is the level of a bucket that is exactly full at nowMs.
func (l Limit) base(nowMs int64) Int128 { return l.at(nowMs).Sub(l.span(l.Capacity)) }

// Full returns the state of a bucket that is full at nowMs: new buckets
// start full.
func (l Limit) Full(nowMs int64) State { return State{X: l.base(nowMs)} }

// Holding returns the state of a bucket of l that holds n millitokens at
// nowMs: in debt when n is negative, full when n is Capacity or more.
func (l Limit) Holding(n Millitokens, nowMs int64) State {
	return State{X: l.at(nowMs).Sub(l.span(min(n, l.Capacity)))}
}

// Empty returns the state of a bucket that holds nothing at nowMs.
func (l Limit) Empty(nowMs int64) State { return State{X: l.at(nowMs)} }

// Tokens returns what the bucket holds at nowMs in whole millitokens,
// rounded toward −∞ (negative in debt, saturating at MinMillitokens).
func (l Limit) Tokens(s State, nowMs int64) Millitokens {
	x := Max(s.X, l.base(nowMs))
	t := l.at(nowMs).Sub(x).divFloor(l.periodMs())
	return Millitokens(max(t, int64(MinMillitokens)))
}

// Available returns the whole tokens the bucket holds at nowMs, rounded
// toward −∞ (a bucket in debt reports a negative count).
func (l Limit) Available(s State, nowMs int64) int64 {
	return floorDiv(int64(l.Tokens(s, nowMs)), int64(PerToken))
}

// RetryAfter returns how long a caller wanting n millitokens must wait: zero
// when the bucket holds n at nowMs, else the exact time until it does,
// rounded up to the millisecond. A request larger than the capacity can
// never succeed; its wait is the time until the level would allow it all
// the same, and the caller decides what to do. A negative n is treated as
// zero. A wait longer than any time.Duration saturates.
func (l Limit) RetryAfter(s State, n Millitokens, nowMs int64) time.Duration {
	n = min(max(n, 0), MaxMillitokens)
	// The bucket holds n from the first t with t·ra ≥ X + n·rp, X clamped
	// to a full bucket now: a level below Full(nowMs) means "full", however
	// long ago, so the wait for more than the capacity starts from full now
	// (without the clamp it would count idle time lost to the capacity, and
	// a refused request would be told to retry at once).
	x := Max(s.X, l.base(nowMs))
	return l.until(x.Add(l.span(n)), nowMs)
}

// TimeToFull returns how long until the bucket is full again at nowMs (zero
// when it is full): Envoy's duration_until_reset.
func (l Limit) TimeToFull(s State, nowMs int64) time.Duration {
	return l.until(s.X.Add(l.span(l.Capacity)), nowMs)
}

// FullAt returns the first unix millisecond at which the bucket is full
// again (saturating): when a store may forget it.
func (l Limit) FullAt(s State) int64 {
	t := s.X.Add(l.span(l.Capacity)).divCeil(int64(l.RefillAmount))
	if l.Calendar.IsZero() {
		return t
	}
	return l.Calendar.Start(t)
}

// until returns the time from nowMs until t·ra ≥ target: ⌈(target −
// nowMs·ra)/ra⌉ ms, computed as one difference so that an instant past
// MaxInt64 still counts as later than nowMs.
func (l Limit) until(target Int128, nowMs int64) time.Duration {
	d := target.Sub(l.at(nowMs))
	if d.Sign() <= 0 {
		return 0
	}
	if !l.Calendar.IsZero() {
		// The level is reached at the start of a later period.
		return durationMs(l.Calendar.Start(target.divCeil(int64(l.RefillAmount))) - nowMs)
	}
	return durationMs(d.divCeil(int64(l.RefillAmount)))
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

func durationMs(ms int64) time.Duration {
	if ms > math.MaxInt64/int64(time.Millisecond) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(ms) * time.Millisecond
}

// Restate returns the state under l that holds at nowMs what s holds under
// limit from (whole millitokens, rounded down; debt included). A level means
// nothing without the rate it was written with, so a bucket whose limit
// changes keeps its tokens, not its level. The result may exceed l's
// capacity; the next operation clamps it.
//
// A calendar budget whose total changes within its calendar keeps what was
// spent in the period instead: raised or lowered, it holds the new total
// less the spending (debt carried in included).
func (l Limit) Restate(s State, from Limit, nowMs int64) State {
	if from == l {
		return s
	}
	held := from.Tokens(s, nowMs)
	if !l.Calendar.IsZero() && l.Calendar == from.Calendar {
		held = l.Capacity - (from.Capacity - held)
	}
	return State{X: l.at(nowMs).Sub(l.span(held))}
}

// Budget returns a calendar budget: total millitokens for each period of
// cal, granted whole at the period's start instead of refilled over it.
// Charges may overshoot the total; with carry, a period that ends in debt
// starts the next one short by that debt, otherwise each period starts
// full (a debt beyond MaxMillitokens is forgiven only in part).
//
// It is an ordinary Limit whose clock counts periods (one period is one
// unit of RefillPeriod): every operation, store and condition works on it
// unchanged, and the period is part of the bucket's state, so no reset job
// runs anywhere.
func Budget(total Millitokens, cal Calendar, carry bool) (Limit, error) {
	if cal.IsZero() {
		return Limit{}, ErrCalendar
	}
	l := Limit{Capacity: total, RefillAmount: MaxMillitokens, RefillPeriod: time.Millisecond, Calendar: cal}
	if carry {
		l.RefillAmount = total
	}
	if err := l.Validate(); err != nil {
		return Limit{}, err
	}
	return l, nil
}

// Carries reports whether a calendar budget carries its debt into the next
// period.
func (l Limit) Carries() bool { return l.RefillAmount == l.Capacity }
