// Package degrade keeps a fleet limiting when its shared store cannot
// decide in time (ON_UNAVAILABLE=local).
//
// A Store wraps the shared store (the DynamoDB store). A plan the shared
// store decides is its decision, unchanged. A plan it fails (DynamoDB did
// not answer within the budget, or kept throttling an item, or the store is
// not open yet) is decided here, at once, on buckets of this replica's own
// at its share of the same limits (below), and the decision says so
// (cascade.Decision.Local).
//
// Degradation is per bucket item. The items the shared store named as
// failed (cascade.ItemError; every item of the plan when it named none) are
// degraded: every plan that touches one is decided locally, while plans on
// other items keep going to the shared store. A degraded item goes back to
// the shared store after a write to it succeeds: its repayment, below,
// tried first after Config.Probe (100 ms) and then with a backoff of up to
// 500 ms. While this process runs late (Config.Late: its own CPU is
// saturated, so a call that ran out most likely waited here, not in the
// shared store) an item that degrades is tried again at once.
// Store.DecidedLocally tells whether an item is degraded now (the admin
// API's bucket show reports it per level).
//
// The share. A replica's share of an item's limit follows its demand,
// with no word between replicas: the shared store tells what part of the
// item's recent consumption this replica debited (Demand: the DynamoDB
// store weighs what it debited against the item's running consumption
// counter in the images it gets, over about the last 5 s). The share is
// that part, at least 1/(4N) so that a replica with no recent demand still
// admits something, and 1/N when the store knows no part (under a second
// of history, a cold start), N being the number of live replicas (Fleet).
// It stays what it was while the item is degraded: nothing is seen then.
// The shares of a fleet add up to 1 while every replica's part is above
// the floor, and to at most 1 + (N−1)/(4N), under 1.25, when the others
// hold the floor and start using it during the outage. A local bucket's
// capacity and refill are the share of the limit's; a share that moves by
// more than an eighth remakes it, its tokens kept in proportion.
//
// A local bucket starts bare, holding only the request that makes it (its
// refill being this replica's), while the shared store may be giving the
// bucket's tokens to the replicas it answers: what this replica last saw
// of them may be gone. In an outage (the store has failed this replica's
// calls for Config.Outage, a second, with none answered meanwhile, nor a
// heartbeat, Config.Answered) it starts from what this replica last saw of
// the shared one, its share of the tokens of its last image (full at its
// share with no image), and a bare one is lifted to that once. While the
// fleet is not counted (Config.Settled) every new local bucket starts
// bare, so that replicas starting together do not each take a burst that
// is the shared bucket's to give. A local
// bucket refills at its share of the rate and, while the item is tracked
// here, is brought down, never up, to its share of the shared store's
// answers.
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
