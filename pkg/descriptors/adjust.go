package descriptors

import (
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/dynalimit/dynalimit/pkg/descriptors/suggest"
)

// The schema of a domain's adjustments: which limits are settled after the
// response, and where an access-log entry carries the request's actual
// cost.

// CostSource says where an access-log entry carries a request's actual
// cost. Exactly one of Header, Trailer, or MetadataNamespace+MetadataKey is
// set. Header and Trailer are lower-cased HTTP field names.
type CostSource struct {
	Header, Trailer, MetadataNamespace, MetadataKey string
}

// String describes the source as the YAML writes it: "header x-llm-tokens",
// "trailer x-llm-tokens" or "metadata io.envoy.ai_gateway/llm_total_token".
func (s CostSource) String() string {
	switch {
	case s.Header != "":
		return "header " + s.Header
	case s.Trailer != "":
		return "trailer " + s.Trailer
	}
	return "metadata " + s.MetadataNamespace + "/" + s.MetadataKey
}

// Adjustment settles one named limit of a domain after the response.
//
// Limit is the name the adjustment goes by, unique among the domain's
// adjustments. Without Descriptor it selects every limit of the domain's
// rules with that name (rate_limit.name or a limits: entry). With
// Descriptor it selects the rule whose levels are exactly those entries
// (configured keys and values, wildcards as written) and, of that rule's
// limits, the one named Limit or, when the rule's only limit has no name
// (as the rules Envoy Gateway pushes over xDS), that one: Limit then names
// it for adjustments only (Limit.Name stays empty). Config.AdjustmentFor
// answers whether a rule's limit is selected.
//
// A money limit's adjustment reports input and output tokens instead of one
// count: Input and Output are set and Cost is zero (Split reports which).
// An adjustment whose cost is split selects money limits only, and one
// whose cost is a count selects no money limit.
type Adjustment struct {
	Limit string
	// Cost is where a report carries the request's cost in whole tokens;
	// zero when the cost is split.
	Cost CostSource
	// Input and Output are where a report carries the input and output
	// tokens of a money limit's request; zero when the cost is one count.
	Input, Output CostSource
	// Descriptor is the selected rule's path, root first; nil when the
	// adjustment selects by name alone. Callers must not modify it.
	Descriptor []Entry
	// File and Line say where the adjustment is written.
	File string
	Line int
}

// Split reports whether the adjustment's cost is input and output tokens
// (a money limit's) rather than one count.
func (a Adjustment) Split() bool { return a.Input != (CostSource{}) }

// costText describes the adjustment's cost as /rlconfig writes it.
func (a Adjustment) costText() string {
	if a.Split() {
		return "input " + a.Input.String() + ", output " + a.Output.String()
	}
	return a.Cost.String()
}

// limitRef names one limit of one rule.
type limitRef struct {
	rule *Rule
	id   string
}

// adjustments are a domain's adjustments and the limits they select.
type adjustments struct {
	list []Adjustment
	// refs maps each selected limit to its adjustment in list; nil until
	// resolved against the domain's rules.
	refs map[limitRef]int
}

// Adjustments returns the domain's adjustments in load order, nil when it
// has none. For a Config parsed with Options.AdjustmentsOnly they are as
// written, not yet checked against any rules.
func (c *Config) Adjustments(domain string) []Adjustment {
	if c == nil {
		return nil
	}
	a := c.adjust[domain]
	if a == nil || len(a.list) == 0 {
		return nil
	}
	return append([]Adjustment(nil), a.list...)
}

// AdjustedDomains returns the domains that have adjustments, sorted.
func (c *Config) AdjustedDomains() []string {
	if c == nil {
		return nil
	}
	var out []string
	for _, d := range sortedKeys(c.adjust) {
		if len(c.adjust[d].list) > 0 {
			out = append(out, d)
		}
	}
	return out
}

// HasAdjustments reports whether the domain has adjustments, without
// copying them (a decision asks it per admission).
func (c *Config) HasAdjustments(domain string) bool {
	if c == nil {
		return false
	}
	a := c.adjust[domain]
	return a != nil && len(a.list) > 0
}

// AdjustmentNamed returns the domain's adjustment named name that selects
// its limits by name (no descriptor path), and false when there is none.
func (c *Config) AdjustmentNamed(domain, name string) (Adjustment, bool) {
	if c == nil || c.adjust[domain] == nil {
		return Adjustment{}, false
	}
	for _, a := range c.adjust[domain].list {
		if a.Descriptor == nil && a.Limit == name {
			return a, true
		}
	}
	return Adjustment{}, false
}

// AdjustmentFor returns the adjustment that settles the limit of rule r
// whose Limit.ID is limitID, and false when none does. It costs one map
// lookup.
func (c *Config) AdjustmentFor(r *Rule, limitID string) (Adjustment, bool) {
	if c == nil || r == nil {
		return Adjustment{}, false
	}
	a := c.adjust[r.Domain]
	if a == nil {
		return Adjustment{}, false
	}
	i, ok := a.refs[limitRef{r, limitID}]
	if !ok {
		return Adjustment{}, false
	}
	return a.list[i], true
}

// dumpAdjustments writes one line per adjustment, by domain, for Dump.
func (c *Config) dumpAdjustments(b *strings.Builder) {
	for _, d := range c.AdjustedDomains() {
		for _, a := range c.adjust[d].list {
			fmt.Fprintf(b, "%s adjustment %s: ", d, a.Limit)
			if a.Descriptor != nil {
				b.WriteString("descriptor=" + pathText(a.Descriptor) + " ")
			}
			fmt.Fprintf(b, "cost=%s (%s:%d)\n", a.costText(), a.File, a.Line)
		}
	}
}

// adjustmentList reads a file's adjustments: list. The domain is the
// file's; duplicates are checked across every file of the load.
func (b *builder) adjustmentList(p pair) {
	for _, item := range b.list(p) {
		a, ok := b.adjustment(item)
		if !ok || b.domain == "" {
			continue
		}
		if b.adjust == nil {
			b.adjust = map[string]*adjustments{}
		}
		d := b.adjust[b.domain]
		if d == nil {
			d = &adjustments{}
			b.adjust[b.domain] = d
		}
		if dup := indexLimit(d.list, a.Limit); dup >= 0 {
			b.errorf(a.Line, "limit", "limit '%s' is adjusted twice in domain '%s' (also at %s:%d)", a.Limit, b.domain, d.list[dup].File, d.list[dup].Line)
			continue
		}
		d.list = append(d.list, a)
	}
}

func indexLimit(list []Adjustment, name string) int {
	for i, a := range list {
		if a.Limit == name {
			return i
		}
	}
	return -1
}

// adjustment reads one adjustments entry.
func (b *builder) adjustment(item *yaml.Node) (Adjustment, bool) {
	a := Adjustment{File: b.fileName, Line: item.Line}
	ok, hasCost := true, false
	for _, p := range b.pairs(item) {
		switch p.name {
		case "limit":
			s, good := b.str(p)
			a.Limit, ok = s, ok && good
		case "descriptor":
			d, good := b.adjustDescriptor(p)
			a.Descriptor, ok = d, ok && good
		case "cost":
			ok, hasCost = b.cost(p, &a) && ok, true
		default:
			b.strictUnknown(p, "in an adjustment")
			ok = false
		}
	}
	switch {
	case a.Limit == "":
		b.errorf(item.Line, "limit", "an adjustment needs limit: the name of a limit of the domain's rules")
		ok = false
	case a.Descriptor != nil && !limitNameRE.MatchString(a.Limit):
		b.errorf(item.Line, "limit", "invalid limit name %q: want 1 to 64 of [A-Za-z0-9_-]", a.Limit)
		ok = false
	}
	if !hasCost {
		b.errorf(item.Line, "cost", "an adjustment needs cost: {header: NAME}, {trailer: NAME} or {metadata: {namespace: NS, key: KEY}}, or for a money limit {input: SOURCE, output: SOURCE}")
		ok = false
	}
	return a, ok
}

// strictUnknown reports an unknown key as an error, with the nearest key
// accepted where it stands. Adjustments are an extension, so no key there
// is one envoyproxy/ratelimit ignores.
func (b *builder) strictUnknown(p pair, where string) {
	b.errorf(p.k.Line, p.name, "config error, unknown key '%s' %s%s", p.name, where, didYouMean(p.name, where))
}

// cost reads an adjustment's cost into a: one source, or a money limit's
// input and output sources.
func (b *builder) cost(p pair, a *Adjustment) bool {
	m := b.mapping(p)
	if m == nil {
		if p.v.Kind == yaml.ScalarNode && p.v.Tag == "!!null" {
			b.errorf(p.k.Line, "cost", "cost needs one source: header, trailer or metadata")
		}
		return false
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if k := m.Content[i].Value; k == "input" || k == "output" {
			return b.splitCost(p, m, a)
		}
	}
	c, ok := b.costSource(p, m, "in an adjustment's cost")
	a.Cost = c
	return ok
}

// splitCost reads cost: {input: SOURCE, output: SOURCE}, both required and
// nothing else beside them.
func (b *builder) splitCost(p pair, m *yaml.Node, a *Adjustment) bool {
	ok := true
	for _, q := range b.pairs(m) {
		switch q.name {
		case "input", "output":
			src := &a.Input
			if q.name == "output" {
				src = &a.Output
			}
			sm := b.mapping(q)
			if sm == nil {
				if q.v.Kind == yaml.ScalarNode && q.v.Tag == "!!null" {
					b.errorf(q.k.Line, q.name, "%s needs one source: header, trailer or metadata", q.name)
				}
				ok = false
				continue
			}
			c, good := b.costSource(q, sm, "in a cost's input or output")
			*src, ok = c, ok && good
		case "header", "trailer", "metadata":
			b.errorf(q.k.Line, q.name, "cost has input and output and %s: a money limit's cost is {input: SOURCE, output: SOURCE}, another's one source", q.name)
			ok = false
		default:
			b.strictUnknown(q, "in an adjustment's cost")
			ok = false
		}
	}
	for _, side := range []struct {
		name string
		src  CostSource
	}{{"input", a.Input}, {"output", a.Output}} {
		if side.src == (CostSource{}) && ok {
			b.errorf(p.k.Line, "cost", "cost has no %s: a money limit's cost needs both input and output", side.name)
			ok = false
		}
	}
	return ok
}

// costSource reads the mapping m of p, where (the words of keysAt) m
// stands: exactly one source.
func (b *builder) costSource(p pair, m *yaml.Node, where string) (CostSource, bool) {
	var c CostSource
	var sources []string
	ok := true
	for _, q := range b.pairs(m) {
		switch q.name {
		case "header", "trailer":
			name, good := b.fieldName(q)
			if q.name == "header" {
				c.Header = name
			} else {
				c.Trailer = name
			}
			ok = ok && good
			sources = append(sources, q.name)
		case "metadata":
			ns, key, good := b.metadataSource(q)
			c.MetadataNamespace, c.MetadataKey = ns, key
			ok = ok && good
			sources = append(sources, q.name)
		default:
			b.strictUnknown(q, where)
			ok = false
		}
	}
	switch len(sources) {
	case 0:
		if ok { // else an unknown key said enough
			b.errorf(p.k.Line, p.name, "%s needs one source: header, trailer or metadata", p.name)
		}
		return c, false
	case 1:
		return c, ok
	}
	b.errorf(p.k.Line, p.name, "%s has %s; want exactly one source", p.name, strings.Join(sources, " and "))
	return c, false
}

// fieldName reads an HTTP field name (RFC 9110's token), lower-cased as
// Envoy logs it.
func (b *builder) fieldName(p pair) (string, bool) {
	s, ok := b.str(p)
	if !ok {
		return "", false
	}
	if !validFieldName(s) {
		b.errorf(p.v.Line, p.name, "invalid %s name %q: want an HTTP field name (letters, digits and !#$%%&'*+-.^_`|~)", p.name, s)
		return "", false
	}
	return strings.ToLower(s), true
}

// validFieldName reports whether s is an HTTP field name: one or more
// tchar (RFC 9110, section 5.6.2).
func validFieldName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// metadataSource reads cost: {metadata: {namespace, key}}: a key of Envoy's
// dynamic metadata, both parts required.
func (b *builder) metadataSource(p pair) (ns, key string, ok bool) {
	m := b.mapping(p)
	if m == nil {
		if p.v.Kind == yaml.ScalarNode && p.v.Tag == "!!null" {
			b.errorf(p.k.Line, "metadata", "metadata needs namespace and key")
		}
		return "", "", false
	}
	ok = true
	for _, q := range b.pairs(m) {
		switch q.name {
		case "namespace":
			s, good := b.str(q)
			ns, ok = s, ok && good
		case "key":
			s, good := b.str(q)
			key, ok = s, ok && good
		default:
			b.strictUnknown(q, "in cost metadata")
			ok = false
		}
	}
	if (ns == "" || key == "") && ok {
		b.errorf(p.k.Line, "metadata", "metadata needs namespace and key, both non-empty (e.g. {namespace: io.envoy.ai_gateway, key: llm_total_token})")
	}
	return ns, key, ok && ns != "" && key != ""
}

// adjustDescriptor reads an adjustment's descriptor: the path of the rule
// it selects, a list of {key, value}.
func (b *builder) adjustDescriptor(p pair) ([]Entry, bool) {
	items := b.list(p)
	if len(items) == 0 {
		b.errorf(p.k.Line, "descriptor", "descriptor must list the selected rule's levels, root first: [{key: K, value: V}, ...]")
		return nil, false
	}
	if len(items) > MaxDepth {
		b.errorf(p.k.Line, "descriptor", "descriptor lists %d levels; descriptors nest at most %d", len(items), MaxDepth)
		return nil, false
	}
	out := make([]Entry, 0, len(items))
	ok := len(items) == len(p.v.Content)
	for _, item := range items {
		var e Entry
		for _, q := range b.pairs(item) {
			switch q.name {
			case "key":
				e.Key, _ = b.str(q)
			case "value":
				e.Value, _ = b.str(q)
			default:
				b.strictUnknown(q, "in an adjustment's descriptor")
				ok = false
			}
		}
		if e.Key == "" {
			b.errorf(item.Line, "key", "descriptor level has empty key")
			ok = false
		}
		out = append(out, e)
	}
	return out, ok
}

// resolve checks a domain's adjustments against the domain's rules and
// indexes the limits they select. An adjustment that selects nothing, or a
// limit another adjustment already selects, is a problem and is left out.
func resolve(domain string, list []Adjustment, rules []*Rule) (*adjustments, []Problem) {
	out := &adjustments{refs: map[limitRef]int{}}
	var problems []Problem
	for _, a := range list {
		if dup := indexLimit(out.list, a.Limit); dup >= 0 {
			problems = append(problems, Problem{File: a.File, Line: a.Line, Key: "limit",
				Msg: fmt.Sprintf("limit '%s' is adjusted twice in domain '%s' (also at %s:%d)", a.Limit, domain, out.list[dup].File, out.list[dup].Line)})
			continue
		}
		key := "limit"
		refs, msg := selectLimits(domain, a, rules)
		if msg == "" {
			for _, ref := range refs {
				if j, taken := out.refs[ref]; taken {
					msg = fmt.Sprintf("the limit '%s' of rule %s is already adjusted by the adjustment at %s:%d", ref.id, ref.rule.FullKey, out.list[j].File, out.list[j].Line)
					break
				}
			}
		}
		if msg == "" {
			key, msg = "cost", kindMismatch(a, refs)
		}
		if msg != "" {
			problems = append(problems, Problem{File: a.File, Line: a.Line, Key: key, Msg: msg})
			continue
		}
		for _, ref := range refs {
			out.refs[ref] = len(out.list)
		}
		out.list = append(out.list, a)
	}
	return out, problems
}

// kindMismatch says why adjustment a cannot settle a limit refs select: a
// money limit needs its input and output tokens (priced at admission), a
// limit of tokens or requests one count. "" when it can settle them all.
func kindMismatch(a Adjustment, refs []limitRef) string {
	for _, ref := range refs {
		for _, l := range ref.rule.Limits {
			switch {
			case l.ID != ref.id || l.Money == a.Split():
			case l.Money:
				return fmt.Sprintf("the limit '%s' of rule %s is in dollars: its cost is {input: SOURCE, output: SOURCE}, the input and output tokens its price table prices", ref.id, ref.rule.FullKey)
			default:
				return fmt.Sprintf("cost has input and output, which only a limit in dollars takes; the limit '%s' of rule %s is not: give its cost one source", ref.id, ref.rule.FullKey)
			}
		}
	}
	return ""
}

// selectLimits returns the limits adjustment a selects among the domain's
// rules, or why it selects none.
func selectLimits(domain string, a Adjustment, rules []*Rule) ([]limitRef, string) {
	if len(rules) == 0 {
		return nil, fmt.Sprintf("adjustment of limit '%s': domain '%s' has no rules", a.Limit, domain)
	}
	if a.Descriptor == nil {
		var refs []limitRef
		for _, r := range rules {
			for _, l := range r.Limits {
				if l.Name == a.Limit {
					refs = append(refs, limitRef{r, l.ID})
				}
			}
		}
		if refs != nil {
			return refs, ""
		}
		names := limitNames(rules)
		if len(names) == 0 {
			return nil, fmt.Sprintf("limit '%s' is not a limit of domain '%s', whose limits have no names; name one (rate_limit.name or a limits: entry), or select its rule with descriptor:", a.Limit, domain)
		}
		return nil, fmt.Sprintf("limit '%s' is not a named limit of domain '%s'%s; its named limits: %s", a.Limit, domain, nearest(a.Limit, names), strings.Join(names, ", "))
	}
	for _, r := range rules {
		if !samePath(r.Levels, a.Descriptor) {
			continue
		}
		for _, l := range r.Limits {
			if l.Name == a.Limit || (l.Name == "" && len(r.Limits) == 1) {
				return []limitRef{{r, l.ID}}, ""
			}
		}
		if r.Unlimited {
			return nil, fmt.Sprintf("rule %s selected by descriptor is unlimited: it has no limit to adjust", r.FullKey)
		}
		return nil, fmt.Sprintf("rule %s selected by descriptor has no limit named '%s'; its limits: %s", r.FullKey, a.Limit, strings.Join(limitNames([]*Rule{r}), ", "))
	}
	return nil, fmt.Sprintf("no rule of domain '%s' has the descriptor path %s (/rlconfig lists the rules)", domain, pathText(a.Descriptor))
}

// limitNames returns the distinct names of the rules' named limits, in
// load order.
func limitNames(rules []*Rule) []string {
	var names []string
	seen := map[string]bool{}
	for _, r := range rules {
		for _, l := range r.Limits {
			if l.Name != "" && !seen[l.Name] {
				seen[l.Name] = true
				names = append(names, l.Name)
			}
		}
	}
	return names
}

// nearest returns " (did you mean 'NAME'?)" for the name among names
// nearest to name, "" when none is near.
func nearest(name string, names []string) string {
	if s := suggest.Closest(name, names); s != "" {
		return " (did you mean '" + s + "'?)"
	}
	return ""
}

// samePath reports whether levels are exactly the entries, key and
// configured value, root first.
func samePath(levels []Level, path []Entry) bool {
	if len(levels) != len(path) {
		return false
	}
	for i, l := range levels {
		if l.Key != path[i].Key || l.Value != path[i].Value {
			return false
		}
	}
	return true
}

// pathText writes a descriptor path as [key=value, key].
func pathText(path []Entry) string {
	parts := make([]string, len(path))
	for i, e := range path {
		parts[i] = e.Key
		if e.Value != "" {
			parts[i] += "=" + e.Value
		}
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// WithAdjustments returns a Config with c's rules and the adjustments of
// from (a Config parsed with Options.AdjustmentsOnly), merged by domain:
// each is checked against c's rules of its domain. One that selects no
// limit there (its domain has no such limit, or no rules at all), or a
// limit already adjusted, is left out, and the returned problems say why;
// they are also among the returned Config's Warnings. Everything else of c
// is shared, so the result costs a copy of the adjustments only. A nil
// from returns c.
func (c *Config) WithAdjustments(from *Config) (*Config, []Problem) {
	if from == nil || len(from.adjust) == 0 {
		return c, nil
	}
	out := *c
	out.adjust = make(map[string]*adjustments, len(c.adjust)+len(from.adjust))
	for d, a := range c.adjust {
		out.adjust[d] = a
	}
	byDomain := rulesByDomain(c.rules)
	var problems []Problem
	for _, d := range sortedKeys(from.adjust) {
		list := from.adjust[d].list
		if own := c.adjust[d]; own != nil {
			list = append(append([]Adjustment(nil), own.list...), list...)
		}
		a, ps := resolve(d, list, byDomain[d])
		problems = append(problems, ps...)
		out.adjust[d] = a
	}
	out.warnings = append(append([]Problem(nil), c.warnings...), problems...)
	return &out, problems
}
