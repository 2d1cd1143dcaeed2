package service

import (
	"time"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/descriptors"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// item is one request descriptor on its way through a decision. Each phase
// writes one part and only reads the parts before it: parse writes asked,
// resolve and replace write rule, plan and readDecision (or unavailable)
// write decided, and respond, metadata and observe only read.
type item struct {
	asked   asked
	rule    rule
	decided decided
}

// asked is what the request asked of one descriptor.
type asked struct {
	entries  []descriptors.Entry
	hits     uint64 // whole tokens; 0 checks without debiting
	own      bool   // hits are the descriptor's own hits_addend
	negative bool   // is_negative_hits: a refund
	settles  bool   // the descriptor settles a lease (see leaseOf), with hits as the actual cost
	// in and out are the input and output tokens the descriptor reports
	// (reported; both when it reports the two), for a domain with prices;
	// money is what it costs the money limits, in millitokens
	// (nano-dollars), and price the price it was costed at, both set for a
	// priced rule.
	in, out  uint64
	reported bool
	both     bool
	money    tokenbucket.Millitokens
	price    descriptors.Price
}

// rule is what the configuration (or the descriptor's limit override) says
// applies to one descriptor.
type rule struct {
	match descriptors.Match
	// limits are the limits to apply to the descriptor's own bucket: the
	// rule's, or one override limit.
	limits []descriptors.Limit
	// tiers are the bucket items the descriptor charges: its own (limits),
	// then for a cascading hierarchical rule each entity above it, nearest
	// first, configured and then stored. Set by tiers; few holds up to
	// one of them without an allocation.
	tiers     []tier
	few       [1]tier
	matched   bool // some rule matched
	override  bool // limits come from the descriptor's limit override
	unlimited bool
	replaced  bool // another matched rule of the request replaces this one
	quota     bool // the rule is in quota mode
	shadow    bool // the rule is in shadow mode (not the global mode)
}

// decided is what the decision made of one descriptor: its place in the plan
// and, after the store answered, its most restrictive limit.
type decided struct {
	role cascade.Role
	// slots holds the debit slot of each of the tiers' limits, in tier
	// order (a tier's limits, then the next tier's): the index of its debit
	// in the plan, or noDebit. Set by plan; few holds up to len(few) of them
	// without an allocation (a small few: past 440 bytes an item, with its
	// entries in a oneItem, takes the next size class of the allocator).
	slots    []int32
	few      [4]int32
	worst    int // index in the limits of tier worstAt, -1 when none applies
	worstAt  int // index in rule.tiers of the most restrictive limit
	refused  bool
	remain   int64             // whole tokens after the decision, ≥ 0
	retry    time.Duration     // until the refused hits would be admitted
	reset    time.Duration     // until the bucket is full again
	bucket   tokenbucket.Limit // the limit the store applied to worst
	violated bool              // some limit refused (before shadow)
}

// noDebit is the debit slot of a limit the plan has no debit for: a deny
// limit (requests_per_unit: 0), which the service answers itself.
const noDebit = -1

// tier is one bucket item a descriptor charges, with the limits it applies
// there.
type tier struct {
	key    cascade.Key
	limits []descriptors.Limit
	// rule is the configured rule whose limits these are (nil for a
	// stored ancestor, and for a descriptor's limit override).
	rule  *descriptors.Rule
	depth int
	// level is the descriptor key of a configured entity level ("tenant"),
	// empty for a stored ancestor and for a descriptor without a hierarchy.
	level string
}

// numLimits returns the number of limits of the rule's tiers.
func (r *rule) numLimits() int {
	n := 0
	for _, t := range r.tiers {
		n += len(t.limits)
	}
	return n
}

// worstLimit returns the item's most restrictive limit (decided.worst ≥ 0).
func (it *item) worstLimit() *descriptors.Limit {
	return &it.rule.tiers[it.decided.worstAt].limits[it.decided.worst]
}

// hierarchical reports whether the item's buckets are named by entity and
// resource (a matched hierarchical rule, not overridden).
func (it *item) hierarchical() bool {
	r := &it.rule
	return r.matched && !r.override && r.match.Rule.Hierarchical
}

// applies reports whether the item's limits take part in the decision.
func (it *item) applies() bool {
	return len(it.rule.limits) > 0 && !it.rule.unlimited && !it.rule.replaced
}

// enforcedRefusal reports whether the item refuses the request (not in
// shadow or quota mode).
func (it *item) enforcedRefusal() bool {
	return it.decided.refused && it.decided.role == cascade.Enforce
}

// shadowed reports whether the item's own rule is in shadow mode.
func (it *item) shadowed() bool { return it.rule.shadow && !it.rule.override }
