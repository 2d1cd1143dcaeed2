package tokenbucket

// Level is a bucket's level while a decision works on it. It carries the
// value the decision computes from what the store believes the level to be,
// and, for stores that write with conditions instead of locks, two more
// things:
//
//   - the write: the new level as a function of the stored one, either
//     stored + Delta (an ADD, which commutes with other writers' ADDs) or a
//     constant (a SET, when a clamp to capacity made the value independent
//     of what was stored);
//   - the range of stored levels for which every comparison the decision
//     made comes out the same and the write keeps its form.
//
// A conditional write "if Lo ≤ X ≤ Hi then apply the write" is therefore
// exactly the decision the operations would take on whatever X the store
// holds when the write lands: a refusal of the condition is the only
// conflict, and it happens only when the outcome or the form of the write
// would differ. The range is tight: just outside it, one of them does.
//
// Internally the level is kept as the function max(X + delta, floor) of the
// stored level X (floor only once a clamp happened), which is exact for any
// sequence of operations: comparisons then bound X alone, and the choice
// between ADD and SET is made once, at the end, for the write.
//
// A store under a lock uses the value alone (Stored, then State).
type Level struct {
	x0      Int128 // the stored level the decision believes
	x       Int128 // the level the decision computes: max(x0+delta, floor)
	delta   Int128 // what the operations added
	floor   Int128 // the clamp, shifted by later additions (when floored)
	floored bool   // a clamp applies
	konst   bool   // the level does not depend on a stored one (New)
	lo, hi  Int128 // stored levels for which every comparison holds
	dirty   bool   // an operation added to the level
}

// Stored returns the level of a bucket whose stored state is believed to be
// s: its decisions are conditional on s's range.
func Stored(s State) Level {
	return Level{x0: s.X, x: s.X, lo: MinInt128, hi: MaxInt128}
}

// New returns the level of a bucket the store does not hold yet, starting
// at s (Full, or Empty for a shard that starts empty): its write is a SET
// whatever it does, and it makes no conditions on a stored level. Like any
// level, it is Changed only once an operation debits or credits it.
func New(s State) Level {
	return Level{x0: s.X, x: s.X, konst: true, lo: MinInt128, hi: MaxInt128}
}

// set reports whether the write is a SET of x.
func (v *Level) set() bool {
	return v.konst || (v.dirty && v.floored && v.x0.Add(v.delta).Less(v.floor))
}

// State returns the level the decision computed: what the write leaves
// when the stored level is the one believed.
func (v *Level) State() State { return State{X: v.Apply(v.x0)} }

// Changed reports whether the decision changes the stored level (a store
// writes nothing for a level that did not change).
func (v *Level) Changed() bool { return v.dirty && (v.set() || !v.delta.IsZero()) }

// Write returns the write: (true, the new level) for a SET, or (false, the
// delta) for an ADD.
func (v *Level) Write() (set bool, value Int128) {
	if v.set() {
		return true, v.x
	}
	return false, v.delta
}

// Bounds returns the range of stored levels, inclusive, for which the
// decision holds; MinInt128 and MaxInt128 mean unbounded.
func (v *Level) Bounds() (lo, hi Int128) {
	lo, hi = v.lo, v.hi
	if v.konst || !v.dirty || !v.floored {
		return lo, hi
	}
	// x = max(X + delta, floor): a SET of floor below the edge, an ADD of
	// delta from it on.
	edge := v.floor.Sub(v.delta)
	if v.x0.Less(edge) {
		return lo, Min(hi, edge.Sub(I128(1)))
	}
	return Max(lo, edge), hi
}

// Holds reports whether a stored level x lies within Bounds.
func (v *Level) Holds(x Int128) bool {
	lo, hi := v.Bounds()
	return !x.Less(lo) && !hi.Less(x)
}

// Apply returns the level the write leaves when the stored level was x.
func (v *Level) Apply(x Int128) Int128 {
	if v.set() {
		return v.x
	}
	return x.Add(v.delta)
}

// Restart returns start (the level as it was before any operation), keeping
// the bounds of v's comparisons: a decision that discards its operations (a
// refused plan) still depends on the comparisons that refused it.
func (v *Level) Restart(start Level) Level {
	start.lo, start.hi = Max(start.lo, v.lo), Min(start.hi, v.hi)
	return start
}

// le decides x ≤ t and records the range of stored levels that decide it
// the same way.
func (v *Level) le(t Int128) bool {
	ok := !t.Less(v.x)
	if v.konst {
		return ok
	}
	if v.floored && t.Less(v.floor) {
		return false // x ≥ floor > t, whatever the stored level
	}
	// max(X + delta, floor) ≤ t  ⇔  X ≤ t − delta, as floor ≤ t.
	edge := t.Sub(v.delta)
	if ok {
		v.hi = Min(v.hi, edge)
	} else {
		v.lo = Max(v.lo, edge.Add(I128(1)))
	}
	return ok
}

// clamp lifts a level below b (a bucket fuller than its capacity, which is
// how a full bucket ages) to b. It records no condition: whether the write
// becomes a SET is decided once, for the write (see Bounds).
func (v *Level) clamp(b Int128) {
	v.x = Max(v.x, b)
	if v.konst {
		return
	}
	if !v.floored || v.floor.Less(b) {
		v.floor, v.floored = b, true
	}
}

func (v *Level) add(k Int128) {
	if k.IsZero() {
		return
	}
	v.x = v.x.Add(k)
	v.dirty = true
	if v.konst {
		return
	}
	v.delta = v.delta.Add(k)
	if v.floored {
		v.floor = v.floor.Add(k)
	}
}

// TryConsume debits n millitokens if the bucket holds at least n at nowMs
// and reports whether it did; otherwise the level is unchanged. A negative n
// is treated as zero; more than the capacity never fits.
func (l Limit) TryConsume(v *Level, n Millitokens, nowMs int64) bool {
	n = max(n, 0)
	if n > l.Capacity {
		return false // whatever the stored level
	}
	// The bucket holds max(x, base) ≤ at − n·rp; as base ≤ at − n·rp for
	// n ≤ Capacity, that is x ≤ at − n·rp.
	if !v.le(l.at(nowMs).Sub(l.span(n))) {
		return false
	}
	if n > 0 {
		v.clamp(l.base(nowMs))
		v.add(l.span(n))
	}
	return true
}

// Check reports whether the bucket is not in debt at nowMs: it holds zero
// tokens or more. That is the answer to a request with zero hits, as
// envoyproxy/ratelimit gives it (admitted while the count has not passed
// the limit, so also when it has just reached it). It debits nothing.
func (l Limit) Check(v *Level, nowMs int64) bool {
	return v.le(l.at(nowMs))
}

// Charge debits n millitokens even past zero: cost already spent, which
// refill repays. It reports whether the charge fitted, that is whether the
// bucket held at least n millitokens before it (as TryConsume would have
// admitted it; a charge above the capacity never fits). That is how a
// counter that is incremented whatever the answer judges the increment:
// over the limit when the count after it exceeds the limit. A negative n is
// treated as zero.
func (l Limit) Charge(v *Level, n Millitokens, nowMs int64) bool {
	n = max(n, 0)
	ok := n <= l.Capacity && v.le(l.at(nowMs).Sub(l.span(n)))
	l.ChargeBlind(v, n, nowMs)
	return ok
}

// ChargeBlind debits n millitokens even past zero without judging the
// bucket: a charge applied whatever the decision (no condition recorded).
// A negative n is treated as zero.
func (l Limit) ChargeBlind(v *Level, n Millitokens, nowMs int64) {
	if n <= 0 {
		return
	}
	v.clamp(l.base(nowMs))
	v.add(l.span(n))
}

// Refund credits n millitokens, never above capacity. A negative n is
// treated as zero.
func (l Limit) Refund(v *Level, n Millitokens, nowMs int64) {
	if n <= 0 {
		return
	}
	v.add(l.span(n).Neg())
	v.clamp(l.base(nowMs))
}

// Replaced returns the level of a bucket whose stored level old was written
// under another limit and now stands for s (see Limit.Restate): its write
// is a SET, on the condition that the stored level is still exactly old.
func Replaced(old, s State) Level {
	v := New(s)
	v.lo, v.hi, v.dirty = old.X, old.X, true
	return v
}
