// Package cascade describes what one rate-limit request asks of storage and
// decides it exactly once, the same way for every store.
//
// A Plan is the list of Debits of one request: every limit of every bucket
// item that the request's descriptors touch (and, with entity hierarchies, of
// their parents). A Plan is decided all-or-nothing: when any enforced debit is
// refused, no bucket is debited. Decide is the pure decision over the loaded
// bucket states; stores call it under their own locks (the embedded store) or
// reproduce it with conditional writes (DynamoDB) and must agree with it.
//
// Admission rule, per debit Role:
//   - Enforce: any refusal refuses the plan;
//   - Advisory (shadow mode): reported, never refuses the plan, and a refused
//     advisory debit is not debited;
//   - Quota (quota mode): refused quota debits are reported and not debited;
//     the plan is refused only when every quota debit of the plan is refused.
//
// Charges (Op Charge) and refunds (Op Refund) report cost already spent or
// returned: they are applied whether or not the plan is admitted.
//
// The package does no I/O and never logs; its functions are safe for
// concurrent use.
package cascade
