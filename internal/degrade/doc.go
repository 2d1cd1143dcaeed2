// Package degrade keeps a fleet limiting when its shared store cannot
// decide in time (ON_UNAVAILABLE=local).
//
// A Store wraps the shared store (the DynamoDB store). A plan the shared
// store decides is its decision, unchanged. A plan it fails (DynamoDB did
// not answer within the budget, or kept throttling an item, or the store is
// not open yet) is decided here, at once, on buckets of this replica's own
// with the same limits divided by the number of live replicas (Fleet), and
// the decision says so (cascade.Decision.Local).
//
// Degradation is per bucket item. The items the shared store named as
// failed (cascade.ItemError; every item of the plan when it named none) are
// degraded: every plan that touches one is decided locally, while plans on
// other items keep going to the shared store. A degraded item goes back to
// the shared store after a write to it succeeds: its repayment, below,
// tried first after 100 ms and then with a backoff of up to 500 ms.
//
// A local bucket starts from what this replica last saw of the shared one
// (the tokens of its last image, divided by the fleet's size; full when it
// saw none), refills at its share of the rate and, while the item is
// tracked here, is brought down, never up, to the shared store's answers.
// A local bucket holds at least one token when the shared one does: a
// limit of 2 a minute over 3 replicas admits one request on each rather
// than none anywhere. An item the shared store refused within the last second
// refuses locally too, whatever the other levels of the plan hold.
//
// Repaying. What was admitted, charged or refunded locally is a debt owed
// to the shared items. Each item's debt is repaid by one repayment
// (cascade.Repayment, Shared.Repay): charges and refunds stamped with this
// replica's ID and a stamp higher than any before, which the shared store
// writes as it writes the item's decisions (the DynamoDB store: in the
// item's lane, by its conditional UpdateItem) and applies only over a
// lower stamp. A repayment whose answer was lost is sent again with the
// same stamp until it is answered, applied or a duplicate, so it is never
// applied twice. An item leaves degradation only when its debt is repaid,
// so the first decision the shared store makes again already counts what
// the fleet admitted meanwhile.
//
// When Run's context ends, a last pass tries what is still owed, within
// Config.Drain. What that does not repay, and a repayment dropped (the
// shared store refused it as invalid, or it kept failing for an hour), is
// lost: Observer.Lost counts it, and Run logs what its last pass left
// in one line.
//
// A write whose outcome is unknown (it went unanswered and may have
// landed: cascade.ErrMayHaveLanded) is counted once, by the shared store:
// its plan is answered locally, but its debits on that item are not owed.
// When it did not land, those debits are not counted at all; when it did,
// they are not counted twice.
//
// At most Config.MaxItems items are tracked; a plan that would need one
// more while they are all in use is refused (never admitted unlimited).
package degrade
