package cascade

import (
	"errors"
	"time"

	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// ErrInvalid marks a plan that no store can decide as asked: a limit
// outside tokenbucket's range, or a key a store cannot hold. Stores wrap it;
// the service answers such a request InvalidArgument, never ON_UNAVAILABLE.
var ErrInvalid = errors.New("cascade: invalid plan")

// ErrContended marks a decision that a store could not make within its
// budget because its own keys were busy (a read of them that other
// decisions started, a queue): contention, never an outage. The service
// refuses such a request (Busy), whatever ON_UNAVAILABLE says.
var ErrContended = errors.New("cascade: contended")

// ErrMayHaveLanded marks a store error whose write went unanswered: the
// store may have applied it. A caller that decides the request another way
// (ON_UNAVAILABLE=local) must not charge it again.
var ErrMayHaveLanded = errors.New("cascade: write unanswered, it may have landed")

// ItemError is a store's failure to decide the debits of one bucket item of
// a plan. A store that decides item by item wraps each item's failure in
// one (errors.Join when several failed), so that a caller can tell the
// items in trouble from the items that were only in the same plan.
type ItemError struct {
	// Key is the bucket item that failed.
	Key Key
	// Err is why; it wraps ErrMayHaveLanded when the item's write went
	// unanswered.
	Err error
}

func (e *ItemError) Error() string {
	return "item " + e.Key.Namespace + "/" + e.Key.Entity + "/" + e.Key.Resource + ": " + e.Err.Error()
}

func (e *ItemError) Unwrap() error { return e.Err }

// ItemErrors returns every ItemError in err's tree (through wrapping and
// errors.Join), in order; none when the store did not say which items
// failed.
func ItemErrors(err error) []*ItemError {
	var out []*ItemError
	var walk func(error)
	walk = func(e error) {
		switch x := e.(type) { //nolint:errorlint // walks the tree itself
		case nil:
		case *ItemError:
			out = append(out, x)
		case interface{ Unwrap() []error }:
			for _, c := range x.Unwrap() {
				walk(c)
			}
		case interface{ Unwrap() error }:
			walk(x.Unwrap())
		}
	}
	walk(err)
	return out
}

// Key names one bucket item: the bucket of an entity for a resource in a
// namespace. A bucket item holds one or more named limits. The fields are
// stored as given; stores escape them so that no value can forge or collide
// with another key.
type Key struct {
	Namespace string
	Entity    string
	Resource  string
}

// Op says what a debit does to its bucket.
type Op uint8

const (
	// Consume debits Amount if the bucket holds at least Amount; otherwise the
	// debit is refused and nothing is debited.
	Consume Op = iota
	// Check debits nothing and is admitted while the bucket is not in debt
	// (a request with zero hits).
	Check
	// Charge debits Amount even past zero (cost already spent). It is
	// admitted when it fits, that is when the bucket held at least Amount
	// before it (as a Consume would be), and applied whether or not it fits
	// and whether or not the plan is admitted: a counter incremented whatever
	// the answer.
	Charge
	// Refund credits Amount, never above capacity; always admitted and applied.
	Refund
)

// String returns the op's name.
func (o Op) String() string {
	switch o {
	case Consume:
		return "consume"
	case Check:
		return "check"
	case Charge:
		return "charge"
	case Refund:
		return "refund"
	}
	return "unknown"
}

// Role says what a refused debit does to its plan.
type Role uint8

const (
	// Enforce means a refusal refuses the whole plan.
	Enforce Role = iota
	// Advisory debits are reported only (shadow mode) and never refuse the plan.
	Advisory
	// Quota debits refuse the plan only when every Quota debit is refused.
	Quota
)

// Debit is one limit of one bucket item that a plan touches.
type Debit struct {
	Key Key
	// Limit is the limit's name within the bucket item.
	Limit string
	// Bucket is the limit's shape: capacity and refill.
	Bucket tokenbucket.Limit
	// Amount is what to consume, charge or refund (≥ 0).
	Amount tokenbucket.Millitokens
	Op     Op
	Role   Role
	// Depth is the debit's level in its descriptor's hierarchy: 0 for the
	// descriptor's own bucket, 1 for its parent entity, and so on. Stores
	// decide every depth alike; they may report it (write batches on
	// parent items).
	Depth uint8
	// Shard is the shard of the bucket item a Settlement's debit applies
	// to: the Status.Shard of the debit it adjusts. Acquire ignores it
	// (stores pick the shard of a decision themselves).
	Shard int
}

// Ancestor is an entity above a plan's own in a stored hierarchy (entity
// records with a parent): its bucket item and the limits stored for it.
type Ancestor struct {
	Key Key
	// Limits are the limits stored for the entity and the resource (or
	// the entity's default), sorted by name; none when nothing is stored.
	Limits []NamedLimit
}

// NamedLimit is a limit with its name within a bucket item.
type NamedLimit struct {
	Name   string
	Bucket tokenbucket.Limit
}

// Plan is every debit of one request, in request order.
type Plan struct {
	Debits []Debit
}

// Status is the outcome of one debit.
type Status struct {
	// OK reports whether this debit's bucket admitted it.
	OK bool
	// Remaining is what the bucket holds after the decision (negative in debt).
	Remaining tokenbucket.Millitokens
	// RetryAfter is how long until the bucket could admit the debit; zero when
	// OK. When the plan is refused, it is how long until the bucket could admit
	// every debit the plan makes of it, each after the consumes and charges
	// before it, so that a retry of the same plan after the longest RetryAfter
	// is admitted by this bucket (absent other traffic).
	RetryAfter time.Duration
	// ResetAfter is how long until the bucket is full again.
	ResetAfter time.Duration
	// Bucket is the limit the store applied: the debit's own, or one the
	// store resolved in its place (a stored per-entity or per-resource
	// override in the DynamoDB store), so that answers describe the limit
	// that decided.
	Bucket tokenbucket.Limit
	// Shard is the shard of the bucket item that decided the debit (0 in
	// a store without shards): a Settlement of this debit names it.
	Shard int
	// Contended: refused because the store was too busy to decide the
	// debit (Busy), not because its bucket was short; Remaining is then
	// not the bucket's.
	Contended bool
}

// Decision is the outcome of a plan: whether it was admitted, and one Status
// per debit in plan order.
type Decision struct {
	Admitted bool
	Statuses []Status
	// Local: the shared store could not decide the plan in time, and this
	// replica decided it on its own buckets at its share of the fleet
	// (ON_UNAVAILABLE=local).
	Local bool
}

// Busy is the decision of a plan that a store could not decide because its
// own buckets were too busy (contention, not an outage): every debit is
// refused with retryAfter but advisory debits and refunds, which never
// refuse, and the plan is admitted only if the admission rule admits that.
// Remaining is left zero: the store did not see the buckets.
func Busy(debits []Debit, retryAfter time.Duration) Decision {
	dec := Decision{Statuses: make([]Status, len(debits))}
	for i, d := range debits {
		st := &dec.Statuses[i]
		st.Bucket = d.Bucket
		st.OK = d.Role == Advisory || d.Op == Refund
		if !st.OK {
			st.RetryAfter = retryAfter
			st.Contended = true
		}
	}
	dec.Admitted = Admit(debits, dec.Statuses)
	return dec
}

// Admit applies the admission rule to the per-debit outcomes in statuses
// (one per debit, in order).
func Admit(debits []Debit, statuses []Status) bool {
	quotas, quotaOK := 0, 0
	for i := range debits {
		switch debits[i].Role {
		case Enforce:
			if !statuses[i].OK {
				return false
			}
		case Quota:
			quotas++
			if statuses[i].OK {
				quotaOK++
			}
		}
	}
	return quotas == 0 || quotaOK > 0
}
