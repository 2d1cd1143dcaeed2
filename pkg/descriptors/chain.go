package descriptors

import "strings"

// MaxChain is the most entity levels one path may hold, and the longest
// chain of entities (a request's own and its ancestors, configured or
// stored) that one request is charged.
const MaxChain = 8

// Tier is one level of a hierarchical match: the bucket item it charges and
// the limits configured on it.
//
// A hierarchical rule's buckets are named by entity and resource instead of
// by every entry of the request. A tier at an entity level is the bucket of
// that level's value (the entity) for the resource: the value of the
// resource level at or above it, or else the domain. The entries above it
// that are neither entity nor resource levels (a route name, say) keep the
// buckets of different branches of the tree apart: they follow the entity
// as "#" and their canonical encoding. So two API keys under one tenant
// share the tenant's bucket, and the same tenant under two routes has one
// bucket per route.
type Tier struct {
	// Depth is 0 for the request's own bucket, 1 for its parent, and so on.
	Depth int
	// Key is the descriptor key of the level ("tenant"); empty for the own
	// tier of a rule without entity levels.
	Key string
	// Entity names the bucket's entity: the level's value, escaped as
	// Match.EntityID escapes values, then "#" and the other entries above
	// it when there are any. It never contains '=' or '~' before a '#', so
	// it cannot equal the EntityID of a rule without entity levels.
	Entity string
	// Resource is the resource level's value at or above the tier, or the
	// domain.
	Resource string
	// Limits are the limits configured at the level: the rule's own for
	// depth 0, the rule of the level's node above (none when that node has
	// no rate limit, or is unlimited).
	Limits []Limit
	// Rule is the rule whose Limits these are (nil when the level's node
	// has none): Config.AdjustmentFor(Rule, limit.ID) says whether a limit
	// of the tier is settled after the response.
	Rule *Rule
}

// tierDef is a tier of a rule: the index in Levels of its entity level (-1
// for the own tier of a rule with a resource level and no entity level),
// how many levels name it (its prefix), and the rule of its node.
type tierDef struct {
	level  int
	prefix int
	rule   *Rule
	// plain: some level of the prefix is neither an entity nor the
	// resource; resource: the index of the resource level in the prefix,
	// or -1.
	plain    bool
	resource int
}

// chain fills the rule's hierarchy from its levels and the rules of the
// nodes above it (above[i] is the rule of Levels[i], nil when none).
func (r *Rule) chain(above []*Rule) {
	own := -1
	for i, l := range r.Levels {
		r.Hierarchical = r.Hierarchical || l.Entity || l.Resource
		if l.Entity {
			own = i
		}
	}
	if !r.Hierarchical {
		return
	}
	r.tiers = append(r.tiers, r.tierDef(own, len(r.Levels), r))
	if own < 0 || !r.Levels[own].Cascade {
		return
	}
	r.Cascade = true
	for i := own - 1; i >= 0; i-- {
		if r.Levels[i].Entity {
			r.tiers = append(r.tiers, r.tierDef(i, i+1, above[i]))
		}
	}
}

func (r *Rule) tierDef(level, prefix int, rule *Rule) tierDef {
	t := tierDef{level: level, prefix: prefix, rule: rule, resource: -1}
	for i, l := range r.Levels[:prefix] {
		switch {
		case l.Resource:
			t.resource = i
		case !l.Entity:
			t.plain = true
		}
	}
	return t
}

// Tiers returns the tiers a hierarchical match charges: its own, then, when
// its rule cascades, each entity level above it, nearest first. It returns
// nil for a rule that is not hierarchical (its bucket is Match.EntityID in
// the domain).
func (m Match) Tiers() []Tier {
	out := make([]Tier, m.NumTiers())
	for d := range out {
		out[d] = m.Tier(d)
	}
	return out
}

// NumTiers returns how many tiers a hierarchical match charges (see
// Tiers): 0 for a rule that is not hierarchical.
func (m Match) NumTiers() int {
	r := m.Rule
	if r == nil || !r.Hierarchical || len(m.Entries) != len(r.Levels) {
		return 0
	}
	return len(r.tiers)
}

// Tier returns tier d of the match, 0 ≤ d < NumTiers() (see Tiers). It
// allocates only for an entity whose value needs escaping or that carries
// other entries.
func (m Match) Tier(d int) Tier { return m.tier(d, m.Rule.tiers[d]) }

// EmptyEntity returns the key of an entity level whose value is empty in
// the match, if any: an empty value names no entity, and the service refuses
// such a request as invalid.
func (m Match) EmptyEntity() (string, bool) {
	r := m.Rule
	if r == nil || !r.Hierarchical {
		return "", false
	}
	for i, l := range r.Levels {
		if l.Entity && i < len(m.Entries) && m.Entries[i].Value == "" {
			return l.Key, true
		}
	}
	return "", false
}

func (m Match) tier(depth int, t tierDef) Tier {
	r := m.Rule
	out := Tier{Depth: depth, Resource: r.Domain, Rule: t.rule}
	if t.rule != nil && !t.rule.Unlimited {
		out.Limits = t.rule.Limits
	}
	if t.level >= 0 {
		out.Key = r.Levels[t.level].Key
	}
	if t.level >= 0 && !t.plain && !needsEscape(m.Entries[t.level].Value) {
		// The common case: the entity's own value, as it is.
		out.Entity = m.Entries[t.level].Value
		if t.resource >= 0 {
			out.Resource = m.Entries[t.resource].Value
		}
		return out
	}
	var b strings.Builder
	if t.level >= 0 {
		escapeTo(&b, m.Entries[t.level].Value)
	}
	plain := false
	for i := 0; i < t.prefix; i++ {
		l := r.Levels[i]
		switch {
		case l.Resource:
			out.Resource = m.Entries[i].Value
			continue
		case l.Entity:
			continue
		}
		if !plain {
			b.WriteByte('#')
			plain = true
		} else {
			b.WriteByte('&')
		}
		e := m.Entries[i]
		escapeTo(&b, e.Key)
		if l.ShareThreshold {
			b.WriteByte('~')
		} else {
			b.WriteByte('=')
		}
		escapeTo(&b, e.Value)
	}
	if t.level < 0 && !plain {
		b.WriteByte('#') // a resource alone: no entity, no other entry
	}
	out.Entity = b.String()
	return out
}

// money reports whether some limit the rule charges is in money: its own,
// or those of the configured levels its cascade charges.
func (r *Rule) money() bool {
	rules := []*Rule{r}
	for _, t := range r.tiers {
		rules = append(rules, t.rule)
	}
	for _, rr := range rules {
		if rr == nil {
			continue
		}
		for _, l := range rr.Limits {
			if l.Money {
				return true
			}
		}
	}
	return false
}
