package cascade

import (
	"fmt"
)

// MaxReplica is the longest Repayment.Replica a store accepts, in bytes.
const MaxReplica = 64

// Repayment charges a shared bucket item what one replica decided on it
// locally while the shared store did not answer (ON_UNAVAILABLE=local):
// charges of what it admitted, refunds of what it gave back. Every debit
// is on its Key, a Charge (applied even past zero, into debt) or a Refund
// (never above capacity); Role, Depth and Shard are ignored.
//
// A store applies a repayment whole or not at all, and once: it keeps, in
// the item, the highest Stamp it applied from each Replica, and applies a
// repayment only when its Stamp is higher. So a replica that sends the same
// repayment again, because an earlier attempt went unanswered, is told it
// is a Duplicate when that attempt landed; each new repayment it sends, on
// any item, is stamped higher than every one before. The store writes it
// as its decisions are written (the item's own conditional write), so that
// a repayment is not the write least likely to land on a hot item.
type Repayment struct {
	// Replica names the replica that owes: 1 to MaxReplica bytes of
	// [A-Za-z0-9._-], unique in the fleet and never reused.
	Replica string
	// Stamp orders the replica's repayments: positive, higher than any it
	// sent before. A store may forget a replica's stamp an hour after it
	// (as unix microseconds) has passed, so a replica stamps by its clock
	// and stops sending a repayment an hour after its stamp.
	Stamp int64
	// Key is the bucket item repaid.
	Key Key
	// Debits are the charges and refunds, all on Key; none is allowed (a
	// probe: the stamp alone is written).
	Debits []Debit
}

// ErrRepayment marks a Repayment no store can apply. It wraps ErrInvalid.
var ErrRepayment = fmt.Errorf("cascade: invalid repayment: %w", ErrInvalid)

// Validate reports whether r is a repayment a store can apply (an error
// wrapping ErrRepayment when not).
func (r *Repayment) Validate() error {
	if r == nil {
		return fmt.Errorf("%w: nil", ErrRepayment)
	}
	if !validReplica(r.Replica) {
		return fmt.Errorf("%w: replica %q: 1 to %d of [A-Za-z0-9._-]", ErrRepayment, r.Replica, MaxReplica)
	}
	if r.Stamp <= 0 {
		return fmt.Errorf("%w: stamp %d (positive)", ErrRepayment, r.Stamp)
	}
	for i := range r.Debits {
		d := &r.Debits[i]
		switch {
		case d.Op != Charge && d.Op != Refund:
			return fmt.Errorf("%w: debit %d is a %s (a charge or a refund only)", ErrRepayment, i, d.Op)
		case d.Amount < 0:
			return fmt.Errorf("%w: debit %d has a negative amount", ErrRepayment, i)
		case d.Key != r.Key:
			return fmt.Errorf("%w: debit %d is on another key than the repayment's (one bucket item a repayment)", ErrRepayment, i)
		}
	}
	return nil
}

func validReplica(id string) bool {
	if len(id) == 0 || len(id) > MaxReplica {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
