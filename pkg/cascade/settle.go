package cascade

import (
	"fmt"
	"time"
)

// MaxSettlementID is the longest Settlement.ID a store accepts, in bytes.
const MaxSettlementID = 64

// Settlement adjusts buckets after the fact, at most once per ID: the
// difference between what a request was charged when it was admitted (its
// estimate) and what it turned out to cost. Every debit is a Charge (the
// request cost more; applied even past zero, into debt) or a Refund (it
// cost less; never above capacity), on the shard the estimate was taken
// from (Debit.Shard). Role and Depth are ignored: a settlement is never
// refused.
//
// A store applies a Settlement whole or not at all, and applies an ID once
// however many times, from however many replicas, it is asked until
// Expires: a second Settle of the ID reports Duplicate and changes nothing.
// After Expires the store may forget the ID; whoever issues IDs must refuse
// to settle them by then (a lease that expired).
type Settlement struct {
	// ID names the settlement: 1 to MaxSettlementID bytes, any value.
	ID string
	// Expires is when the store may forget ID.
	Expires time.Time
	// Debits are the charges and refunds; none is allowed (the ID is then
	// only recorded, so that a later Settle of it is a duplicate).
	Debits []Debit
}

// Settled is the outcome of a Settlement.
type Settled struct {
	// Duplicate: the ID was settled before (by this call's earlier attempt
	// that went unanswered, this reports false); nothing changed.
	Duplicate bool
	// Statuses holds one Status per debit in order when the settlement was
	// applied (Remaining after it); nil for a duplicate.
	Statuses []Status
}

// ErrSettlement marks a Settlement no store can apply: an empty or too
// long ID, or a debit that is neither a Charge nor a Refund, or a negative
// amount. It wraps ErrInvalid.
var ErrSettlement = fmt.Errorf("cascade: invalid settlement: %w", ErrInvalid)

// Validate reports whether s is a settlement a store can apply (an error
// wrapping ErrSettlement when not).
func (s *Settlement) Validate() error {
	if len(s.ID) == 0 || len(s.ID) > MaxSettlementID {
		return fmt.Errorf("%w: id of %d bytes (1 to %d)", ErrSettlement, len(s.ID), MaxSettlementID)
	}
	for i := range s.Debits {
		d := &s.Debits[i]
		switch {
		case d.Op != Charge && d.Op != Refund:
			return fmt.Errorf("%w: debit %d is a %s (a charge or a refund only)", ErrSettlement, i, d.Op)
		case d.Amount < 0:
			return fmt.Errorf("%w: debit %d has a negative amount", ErrSettlement, i)
		case d.Shard < 0:
			return fmt.Errorf("%w: debit %d has a negative shard", ErrSettlement, i)
		}
	}
	return nil
}
