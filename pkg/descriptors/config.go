package descriptors

import (
	"cmp"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// Entry is one entry of a request descriptor, as Envoy sends it.
type Entry struct {
	Key, Value string
}

// Limit is one configured limit of a rule: the single limit of a
// `rate_limit` block, or one named entry of a `limits:` list.
type Limit struct {
	// Name is the configured name: rate_limit.name (may be empty) or the
	// name of a limits[] entry (never empty).
	Name string
	// ID is the limit's storage name within its bucket item, never empty:
	// Name, or "default" for an unnamed rate_limit.
	ID string
	// Unit and UnitMultiplier give the period: Unit.Duration()·UnitMultiplier.
	Unit Unit
	// RequestsPerUnit is the sustained rate per period; 0 denies every hit.
	RequestsPerUnit uint64
	// UnitMultiplier is at least 1.
	UnitMultiplier uint32
	// Burst is the configured bucket capacity (0 when not configured, which
	// means a capacity of RequestsPerUnit). When set it is ≥ RequestsPerUnit.
	Burst uint64
	// Charge says whether hits are debited before admission or after the fact.
	Charge Charge
	// Deny is set for requests_per_unit: 0: every hit is over the limit.
	// Bucket is the zero Limit then.
	Deny bool
	// Bucket is tokenbucket.Rate(RequestsPerUnit, Period(), Burst), or for
	// a calendar budget tokenbucket.Budget (its Calendar is set).
	Bucket tokenbucket.Limit
	// Money: the limit counts micro-dollars (one token is one micro-dollar),
	// charged at the domain's prices (PriceTable).
	Money bool
}

// IsBudget reports whether l is a calendar budget: RequestsPerUnit granted
// whole at the start of each calendar period (Unit), not refilled.
func (l Limit) IsBudget() bool { return !l.Bucket.Calendar.IsZero() }

// Period returns the limit's period, Unit.Duration()·UnitMultiplier.
func (l Limit) Period() time.Duration {
	return l.Unit.Duration() * time.Duration(l.UnitMultiplier)
}

// Level is one level of a rule's path, from the domain's top-level
// descriptors down to the rule's own node.
type Level struct {
	// Key is the descriptor key; Value the configured value: "" for a
	// key-only level, a pattern when Wildcard is set.
	Key, Value string
	// Entity: the request's value at this level names an entity.
	Entity bool
	// Resource: the request's value at this level names the resource.
	Resource bool
	// Cascade: charges to this entity also charge its parent entities.
	Cascade bool
	// Wildcard: Value contains '*', each matching any run of characters.
	Wildcard bool
	// ShareThreshold: every value matching the wildcard shares one bucket.
	ShareThreshold bool
	// ValueToMetric: the request's value appears in the metric key.
	ValueToMetric bool
}

// Rule is a configured descriptor node that carries a rate limit.
type Rule struct {
	// Domain and Namespace place the rule. Namespace is its file's
	// `namespace:` key; empty (a file without one) means the deployment's
	// namespace (the service's NAMESPACE), which the store applies.
	Domain, Namespace string
	// FullKey is envoyproxy/ratelimit's stats key for the rule, e.g.
	// "domain.key_value.key2"; wildcard levels appear with their pattern.
	FullKey string
	// Name is rate_limit.name: what other rules' `replaces` refer to.
	Name string
	// Limits holds one limit for rate_limit, several for `limits:`, none
	// when Unlimited.
	Limits []Limit
	// Unlimited is rate_limit.unlimited: every hit is within the limit and
	// no store is consulted.
	Unlimited bool
	// Replaces names the rules (by Name) that this rule replaces when both
	// apply to one request.
	Replaces []string
	// ShadowMode: over-limit results are reported but never refuse.
	ShadowMode bool
	// QuotaMode: over-limit results refuse only when every quota-mode
	// descriptor of the request is over its limit.
	QuotaMode bool
	// DetailedMetric: the metric key holds every request value.
	DetailedMetric bool
	// ValueToMetric: some level of the path sets value_to_metric, so the
	// metric key holds that level's request value.
	ValueToMetric bool
	// Metadata is the rule's `metadata` map flattened to strings: nested
	// maps join their keys with '.', lists use their index, scalars are
	// written as text (null as ""). Nil when the rule has no metadata.
	Metadata map[string]string
	// MetadataTree is the `metadata` map as written (values are string,
	// bool, int64, uint64, float64, nil, []any or map[string]any), for
	// callers that forward it as a structured value. Nil when absent.
	MetadataTree map[string]any
	// Levels is the rule's path, root first; len(Levels) is the number of
	// request entries the rule matches.
	Levels []Level
	// File and Line say where the rule's descriptor is defined.
	File string
	Line int
	// Hierarchical is set when some level of the path has entity: true or
	// resource: true. The rule's buckets are then named by entity and
	// resource (Match.Tiers) instead of Match.EntityID.
	Hierarchical bool
	// Cascade is set when the rule's own entity level (the deepest entity
	// level of its path) has cascade: true: a request then charges every
	// entity level above it too, and after the topmost one the ancestors
	// that stored entity records name.
	Cascade bool
	// Priced is set when some limit the rule charges, on its own bucket or
	// on a configured level above it, is in money: a request it matches is
	// priced by its domain's PriceTable.
	Priced bool

	tiers []tierDef // Hierarchical: the own tier, then the tiers above when Cascade

	shared  bool // some level has ShareThreshold
	dynamic bool // MetricKey may differ from FullKey
}

// Match is the result of matching one request descriptor.
type Match struct {
	// Rule is the matched rule.
	Rule *Rule
	// Entries are the request entries that identify the bucket. A
	// share_threshold level contributes its wildcard pattern instead of the
	// request's value. Entries aliases the input slice when nothing is
	// shared, so callers must not modify it.
	Entries []Entry
	// MetricKey is Rule.FullKey, or, with detailed_metric or
	// value_to_metric, the key with request values as envoyproxy/ratelimit
	// builds it.
	MetricKey string
}

// Config is a parsed and validated set of descriptor files compiled into a
// lookup tree. It is immutable after Parse and safe for concurrent use.
type Config struct {
	domains  map[string]*node
	names    []string
	rules    []*Rule
	warnings []Problem
	adjust   map[string]*adjustments // by domain
	prices   map[string]*PriceTable  // by domain
}

type pairKey struct{ key, value string }

// node is one descriptor of the compiled tree. The domain root is a node
// with children only.
type node struct {
	exact     map[pairKey]*node
	keyOnly   map[string]*node
	wildcards []*node
	children  int
	rule      *Rule
	level     Level
	pattern   string // wildcard pattern (level.Value) when level.Wildcard
}

func (n *node) child(e Entry) *node {
	if c := n.exact[pairKey{e.Key, e.Value}]; c != nil {
		return c
	}
	for _, c := range n.wildcards {
		if c.level.Key == e.Key && globMatch(c.pattern, e.Value) {
			return c
		}
	}
	return n.keyOnly[e.Key]
}

// Match finds the rule for one request descriptor, as envoyproxy/ratelimit's
// GetLimit does: at each level it tries the exact key and value, then the
// wildcard values of that level in load order, then the key alone; it
// descends while the matched node has children, and the rule applies only
// when its node is reached at the request's last entry. It reports false for
// an unknown domain, an empty descriptor or no rule (a level without a rate
// limit only whitelists).
//
// Match does not allocate unless the rule shares a wildcard bucket or builds
// a detailed metric key.
func (c *Config) Match(domain string, entries []Entry) (Match, bool) {
	n := c.domains[domain]
	if n == nil || len(entries) == 0 {
		return Match{}, false
	}
	var rule *Rule
	for i, e := range entries {
		next := n.child(e)
		if next == nil {
			break
		}
		if i == len(entries)-1 {
			rule = next.rule
		}
		if next.children == 0 {
			break
		}
		n = next
	}
	if rule == nil {
		return Match{}, false
	}
	m := Match{Rule: rule, Entries: entries, MetricKey: rule.FullKey}
	if rule.shared {
		m.Entries = make([]Entry, len(entries))
		for i, e := range entries {
			if rule.Levels[i].ShareThreshold {
				e.Value = rule.Levels[i].Value
			}
			m.Entries[i] = e
		}
	}
	if rule.dynamic {
		m.MetricKey = metricKey(rule, entries)
	}
	return m, true
}

// metricKey builds envoyproxy/ratelimit's stats key for a match whose rule
// sets detailed_metric or has a value_to_metric level.
func metricKey(r *Rule, entries []Entry) string {
	var b strings.Builder
	n := len(r.Domain)
	for i, e := range entries {
		n += len(e.Key) + len(e.Value) + len(r.Levels[i].Value) + 2
	}
	b.Grow(n)
	b.WriteString(r.Domain)
	keyPattern := func(e Entry, lv Level) {
		b.WriteString(e.Key)
		b.WriteByte('_')
		b.WriteString(lv.Value)
	}
	keyValue := func(e Entry) {
		b.WriteString(e.Key)
		if e.Value != "" {
			b.WriteByte('_')
			b.WriteString(e.Value)
		}
	}
	for i, e := range entries {
		lv := r.Levels[i]
		b.WriteByte('.')
		switch {
		case r.DetailedMetric && r.shared:
			if lv.ShareThreshold {
				keyPattern(e, lv)
			} else {
				keyValue(e)
			}
		case r.DetailedMetric:
			b.WriteString(e.Key)
			b.WriteByte('_')
			b.WriteString(e.Value)
		case lv.Value == "":
			if lv.ValueToMetric {
				keyValue(e)
			} else {
				b.WriteString(e.Key)
			}
		case lv.Wildcard && (lv.ShareThreshold || !lv.ValueToMetric):
			keyPattern(e, lv)
		default:
			keyValue(e)
		}
	}
	return b.String()
}

// HasDomain reports whether some file configures the domain.
func (c *Config) HasDomain(domain string) bool {
	_, ok := c.domains[domain]
	return ok
}

// Domains returns the configured domains, sorted.
func (c *Config) Domains() []string {
	return append([]string(nil), c.names...)
}

// Rules returns every rule that carries a rate limit (unlimited ones too),
// in load order. The rules are shared; callers must not modify them.
func (c *Config) Rules() []*Rule {
	return append([]*Rule(nil), c.rules...)
}

// Warnings returns what was accepted but ignored, as envoyproxy/ratelimit
// ignores it: keys it knows but that have no meaning where they stand (for
// example shadow_mode inside rate_limit).
func (c *Config) Warnings() []Problem {
	return append([]Problem(nil), c.warnings...)
}

// Dump returns one line per rule in load order, in the shape of
// envoyproxy/ratelimit's /rlconfig:
//
//	domain.key_value: unit=MINUTE requests_per_unit=20, shadow_mode: false
//
// followed by the settings that differ from their defaults, and by
// "namespace: NS" for a rule whose file names its namespace. Then one line
// per adjustment, by domain:
//
//	llm adjustment tpm: cost=header x-llm-tokens (llm.yaml:3)
func (c *Config) Dump() string { return c.DumpIn("") }

// DumpIn is Dump as a deployment whose namespace is namespace sees the
// rules: every rule's line ends with the namespace its buckets and stored
// limits are under, its file's or, for a file without `namespace:`,
// namespace. An empty namespace is Dump.
func (c *Config) DumpIn(namespace string) string {
	var b strings.Builder
	for _, r := range c.rules {
		b.WriteString(r.FullKey)
		b.WriteString(": ")
		switch {
		case r.Unlimited:
			b.WriteString("unit=UNKNOWN requests_per_unit=0, unlimited: true")
		case len(r.Limits) == 1 && r.Limits[0].Name == r.Name:
			dumpLimit(&b, r.Limits[0])
		default:
			b.WriteString("limits=[")
			for i, l := range r.Limits {
				if i > 0 {
					b.WriteString("; ")
				}
				b.WriteString(l.Name)
				b.WriteString(": ")
				dumpLimit(&b, l)
			}
			b.WriteString("]")
		}
		fmt.Fprintf(&b, ", shadow_mode: %t", r.ShadowMode)
		if r.QuotaMode {
			b.WriteString(", quota_mode: true")
		}
		if r.Name != "" {
			b.WriteString(", name: " + strconv.Quote(r.Name))
		}
		if len(r.Replaces) > 0 {
			b.WriteString(", replaces: " + strings.Join(r.Replaces, ","))
		}
		if ns := cmp.Or(r.Namespace, namespace); ns != "" {
			b.WriteString(", namespace: " + ns)
		}
		b.WriteByte('\n')
	}
	c.dumpAdjustments(&b)
	return b.String()
}

func dumpLimit(b *strings.Builder, l Limit) {
	if l.IsBudget() {
		// budget=50.00usd/day@America/New_York debt=carry
		unit := ""
		if l.Money {
			unit = "usd"
		}
		debt := "forgive"
		if l.Bucket.Carries() {
			debt = "carry"
		}
		fmt.Fprintf(b, "budget=%s%s/%s debt=%s", l.Amount(int64(l.RequestsPerUnit)), unit, l.Bucket.Calendar, debt)
		if l.Charge != ChargeUnset {
			fmt.Fprintf(b, " charge=%s", l.Charge)
		}
		return
	}
	fmt.Fprintf(b, "unit=%s requests_per_unit=%d", l.Unit, l.RequestsPerUnit)
	if l.UnitMultiplier != 1 {
		fmt.Fprintf(b, " unit_multiplier=%d", l.UnitMultiplier)
	}
	if l.Burst != 0 {
		fmt.Fprintf(b, " burst=%d", l.Burst)
	}
	if l.Charge != ChargeUnset {
		fmt.Fprintf(b, " charge=%s", l.Charge)
	}
}

// sortedDomains returns the keys of m, sorted.
func sortedDomains(m map[string]*node) []string { return sortedKeys(m) }

// sortedKeys returns the keys of m, sorted.
func sortedKeys[V any](m map[string]V) []string {
	names := make([]string, 0, len(m))
	for d := range m {
		names = append(names, d)
	}
	sort.Strings(names)
	return names
}

// rulesByDomain groups rules by domain, keeping their order.
func rulesByDomain(rules []*Rule) map[string][]*Rule {
	out := map[string][]*Rule{}
	for _, r := range rules {
		out[r.Domain] = append(out[r.Domain], r)
	}
	return out
}
