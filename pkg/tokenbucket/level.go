package tokenbucket

// Level is a bucket's level while a decision works on it. It carries the
// value the decision computes from what the store believes the level to be,
// and, for stores that write with conditions instead of locks, two more
// things:
//
//   - the write: the new level as a function of the stored one, either
//     stored + Delta (an ADD, which commutes with other writers' ADDs) or a
//     constant (a SET, once a clamp to capacity made the value independent
//     of what was stored);
//   - the range of stored levels for which every comparison the decision
//     made comes out the same.
//
// A conditional write "if Lo ≤ X ≤ Hi then apply the write" is therefore
// exactly the decision the operations would take on whatever X the store
// holds when the write lands: a refusal of the condition is the only
// conflict, and it happens only when the outcome would differ.
//
// A store under a lock uses the value alone (Stored, then State).
type Level struct {
	x      Int128 // the level the decision computes
	set    bool   // x no longer depends on the stored level
	delta  Int128 // when !set: x = stored + delta
	lo, hi Int128 // stored levels for which every comparison holds
	dirty  bool   // an operation changed the level
}

// Stored returns the level of a bucket whose stored state is believed to be
// s: its decisions are conditional on s's range.
func Stored(s State) Level {
	return Level{x: s.X, lo: MinInt128, hi: MaxInt128}
}

// New returns the level of a bucket the store does not hold yet, starting
// at s (Full, or Empty for a shard that starts empty): its write is a SET
// whatever it does, and it makes no conditions on a stored level.
func New(s State) Level {
	return Level{x: s.X, set: true, lo: MinInt128, hi: MaxInt128, dirty: true}
}

// State returns the level the decision computed.
func (v *Level) State() State { return State{X: v.x} }

// Changed reports whether the decision changes the stored level (a store
// writes nothing for a level that did not change).
func (v *Level) Changed() bool { return v.dirty && (v.set || !v.delta.IsZero()) }

// Write returns the write: (true, the new level) for a SET, or (false, the
// delta) for an ADD.
func (v *Level) Write() (set bool, value Int128) {
	if v.set {
		return true, v.x
	}
	return false, v.delta
}

// Bounds returns the range of stored levels, inclusive, for which the
// decision holds; MinInt128 and MaxInt128 mean unbounded.
func (v *Level) Bounds() (lo, hi Int128) { return v.lo, v.hi }

// Holds reports whether a stored level x lies within Bounds.
func (v *Level) Holds(x Int128) bool { return !x.Less(v.lo) && !v.hi.Less(x) }

// Apply returns the level the write leaves when the stored level was x.
func (v *Level) Apply(x Int128) Int128 {
	if v.set {
		return v.x
	}
	return x.Add(v.delta)
}

// Restart returns the level as it was before any operation (believed stored
// value s), keeping v's bounds: a decision that discards its operations
// (a refused plan) still depends on the comparisons that refused it.
func (v *Level) Restart(start Level) Level {
	start.lo, start.hi = Max(start.lo, v.lo), Min(start.hi, v.hi)
	return start
}

// le decides x ≤ t and records the range of stored levels that decide it
// the same way.
func (v *Level) le(t Int128) bool {
	ok := !t.Less(v.x)
	if v.set {
		return ok
	}
	// x = X + delta ≤ t  ⇔  X ≤ t − delta
	edge := t.Sub(v.delta)
	if ok {
		v.hi = Min(v.hi, edge)
	} else {
		v.lo = Max(v.lo, edge.Add(I128(1)))
	}
	return ok
}

// clamp lifts a level below b (a bucket fuller than its capacity, which is
// how a full bucket ages) to b. A level that reaches b is a SET from then on.
func (v *Level) clamp(b Int128) {
	if v.set {
		v.x = Max(v.x, b)
		return
	}
	if v.le(b.Sub(I128(1))) { // x < b: full, whatever the exact stored level
		v.set, v.x = true, b
	}
}

func (v *Level) add(k Int128) {
	if k.IsZero() {
		return
	}
	v.x = v.x.Add(k)
	if !v.set {
		v.delta = v.delta.Add(k)
	}
	v.dirty = true
}

// TryConsume debits n millitokens if the bucket holds at least n at nowMs
// and reports whether it did; otherwise the level is unchanged. A negative n
// is treated as zero.
func (l Limit) TryConsume(v *Level, n Millitokens, nowMs int64) bool {
	n = max(n, 0)
	v.clamp(l.base(nowMs))
	if !v.le(l.at(nowMs).Sub(l.span(n))) {
		return false
	}
	v.add(l.span(n))
	return true
}

// Check reports whether the bucket holds more than zero at nowMs (the answer
// to a request with zero hits). It debits nothing.
func (l Limit) Check(v *Level, nowMs int64) bool {
	v.clamp(l.base(nowMs))
	return v.le(l.at(nowMs).Sub(I128(1)))
}

// Charge debits n millitokens even past zero: cost already spent, which
// refill repays. It reports whether the bucket held more than zero before
// the charge (the admission of a post-hoc charge). A negative n is treated
// as zero.
func (l Limit) Charge(v *Level, n Millitokens, nowMs int64) bool {
	ok := l.Check(v, nowMs)
	v.add(l.span(max(n, 0)))
	return ok
}

// ChargeBlind debits n millitokens even past zero without judging the
// bucket: a charge applied whatever the decision (no condition recorded).
func (l Limit) ChargeBlind(v *Level, n Millitokens, nowMs int64) {
	v.clamp(l.base(nowMs))
	v.add(l.span(max(n, 0)))
}

// Refund credits n millitokens, never above capacity. A negative n is
// treated as zero.
func (l Limit) Refund(v *Level, n Millitokens, nowMs int64) {
	b := l.base(nowMs)
	v.clamp(b)
	v.add(l.span(max(n, 0)).Neg())
	v.clamp(b)
}
