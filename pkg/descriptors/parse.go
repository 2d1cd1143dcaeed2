package descriptors

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// DefaultNamespace is the namespace of a file without a `namespace:` key.
const DefaultNamespace = "default"

// Bounds on configured numbers and shapes.
const (
	// MaxRequestsPerUnit bounds requests_per_unit and burst.
	MaxRequestsPerUnit = 1_000_000_000_000
	// MaxDepth bounds how deeply descriptors nest.
	MaxDepth = 64
	// maxNodes bounds the YAML nodes visited per file, aliases expanded.
	maxNodes = 1 << 20
	// maxMetadataDepth bounds nesting inside a metadata map.
	maxMetadataDepth = 32
)

// File is one descriptor file to parse.
type File struct {
	// Name identifies the file in problems (a path for LoadDir).
	Name string
	// Data is the file's YAML.
	Data []byte
}

// Options tune Parse and LoadDir.
type Options struct {
	// MergeDomains lets several files configure one domain (their top-level
	// descriptors merge), as envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG.
	// Without it a domain configured twice is an error.
	MergeDomains bool
	// IgnoreDotFiles makes LoadDir skip files and directories whose names
	// start with ".", as envoyproxy/ratelimit's RUNTIME_IGNOREDOTFILES.
	IgnoreDotFiles bool
}

var (
	namespaceRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	limitNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	yamlLineRE  = regexp.MustCompile(`line (\d+)`)
)

// upstreamKeys are every key envoyproxy/ratelimit accepts anywhere in a
// file: it validates keys against one flat list and ignores those that mean
// nothing where they stand. Such misplaced keys are warnings here.
var upstreamKeys = map[string]bool{
	"domain": true, "key": true, "value": true, "descriptors": true,
	"rate_limit": true, "unit": true, "requests_per_unit": true,
	"unlimited": true, "shadow_mode": true, "name": true, "replaces": true,
	"detailed_metric": true, "value_to_metric": true, "share_threshold": true,
	"quota_mode": true, "unit_multiplier": true, "metadata": true,
}

// Parse parses, validates and compiles descriptor files, in order. It
// returns *Error listing every problem of every file when any file is
// invalid.
func Parse(files []File, opts Options) (*Config, error) {
	b := &builder{
		opts:    opts,
		domains: map[string]*node{},
	}
	for _, f := range files {
		b.file(f)
	}
	if len(b.problems) > 0 {
		return nil, &Error{Problems: b.problems}
	}
	return &Config{
		domains:  b.domains,
		names:    sortedDomains(b.domains),
		rules:    b.rules,
		warnings: b.warnings,
	}, nil
}

// builder accumulates the compiled tree and every problem across files.
type builder struct {
	opts     Options
	domains  map[string]*node
	rules    []*Rule
	problems []Problem
	warnings []Problem

	// per file
	name     string
	ns       string
	domain   string
	budget   int
	overflow bool
}

func (b *builder) errorf(line int, key, format string, args ...any) {
	b.problems = append(b.problems, Problem{File: b.name, Line: line, Key: key, Msg: fmt.Sprintf(format, args...)})
}

func (b *builder) file(f File) {
	b.name, b.ns, b.domain, b.budget, b.overflow = f.Name, DefaultNamespace, "", maxNodes, false
	var doc yaml.Node
	if err := safeUnmarshal(f.Data, &doc); err != nil {
		line := 0
		if m := yamlLineRE.FindStringSubmatch(err.Error()); m != nil {
			line, _ = strconv.Atoi(m[1])
		}
		b.errorf(line, "", "error loading config file: %v", err)
		return
	}
	var root *yaml.Node
	if doc.Kind == yaml.DocumentNode && len(doc.Content) > 0 {
		root = b.deref(doc.Content[0])
	}
	if root == nil || (root.Kind == yaml.ScalarNode && root.Tag == "!!null") {
		b.errorf(1, "domain", "config file cannot have empty domain")
		return
	}
	if root.Kind != yaml.MappingNode {
		b.errorf(root.Line, "", "error loading config file: the document must be a mapping, got %s", kindName(root))
		return
	}
	var descNode *yaml.Node
	domainLine := root.Line
	for _, p := range b.pairs(root) {
		switch p.name {
		case "domain":
			domainLine = p.k.Line
			if s, ok := b.str(p); ok {
				b.domain = s
			}
		case "descriptors":
			descNode = p.v
		case "namespace":
			if s, ok := b.str(p); ok {
				if !namespaceRE.MatchString(s) {
					b.errorf(p.k.Line, p.name, "invalid namespace %q: want 1 to 64 of [A-Za-z0-9._-], starting with a letter or digit", s)
				} else {
					b.ns = s
				}
			}
		default:
			b.unknown(p, "at the top level")
		}
	}
	var root2 *node
	switch {
	case b.domain == "":
		b.errorf(domainLine, "domain", "config file cannot have empty domain")
		root2 = &node{} // still validate the descriptors
	case b.domains[b.domain] != nil && !b.opts.MergeDomains:
		b.errorf(domainLine, "domain", "duplicate domain '%s' in config file", b.domain)
		root2 = &node{}
	case b.domains[b.domain] != nil:
		root2 = b.domains[b.domain]
	default:
		root2 = &node{}
		b.domains[b.domain] = root2
	}
	if descNode != nil {
		b.descriptors(root2, b.domain+".", nil, descNode, "descriptors", 1)
	}
}

// safeUnmarshal parses YAML into a node tree. The parser is third-party
// code; a panic inside it becomes an error so that no input can crash the
// service's reload.
func safeUnmarshal(data []byte, doc *yaml.Node) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("yaml: parser failed: %v", r)
		}
	}()
	return yaml.Unmarshal(data, doc)
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "null"
		}
		return fmt.Sprintf("%s %q", strings.TrimPrefix(n.Tag, "!!"), n.Value)
	}
	return "an alias"
}

// deref follows aliases. It returns nil for an alias cycle or when the
// node budget is spent.
func (b *builder) deref(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode; i++ {
		if i > 100 {
			return nil
		}
		n = n.Alias
	}
	return n
}

// charge spends the per-file node budget; it reports false (once, with a
// problem) when the file expands to too many nodes.
func (b *builder) charge(n int) bool {
	b.budget -= n
	if b.budget >= 0 {
		return true
	}
	if !b.overflow {
		b.overflow = true
		b.errorf(0, "", "error loading config file: more than %d YAML nodes after expanding aliases", maxNodes)
	}
	return false
}

// pair is one key and value of a mapping.
type pair struct {
	k, v *yaml.Node
	name string
}

// pairs returns a mapping's pairs with merge keys (<<) expanded. Non-string
// and duplicate keys are problems and are left out.
func (b *builder) pairs(m *yaml.Node) []pair {
	if !b.charge(len(m.Content)/2 + 1) {
		return nil
	}
	var out []pair
	seen := map[string]bool{}
	var merged []pair
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := b.deref(m.Content[i]), b.deref(m.Content[i+1])
		if k == nil || v == nil {
			b.errorf(m.Content[i].Line, "", "error loading config file: alias cycle")
			continue
		}
		if k.Kind == yaml.ScalarNode && k.Tag == "!!merge" {
			merged = append(merged, b.mergePairs(v, 0)...)
			continue
		}
		if k.Kind != yaml.ScalarNode || k.Tag != "!!str" {
			b.errorf(k.Line, keyText(k), "config error, key is not of type string: %s", keyText(k))
			continue
		}
		if seen[k.Value] {
			b.errorf(k.Line, k.Value, "duplicate key '%s'", k.Value)
			continue
		}
		seen[k.Value] = true
		out = append(out, pair{k: k, v: v, name: k.Value})
	}
	for _, p := range merged {
		if !seen[p.name] {
			seen[p.name] = true
			out = append(out, p)
		}
	}
	return out
}

func (b *builder) mergePairs(v *yaml.Node, depth int) []pair {
	switch {
	case depth > 8:
		b.errorf(v.Line, "<<", "merge keys nested too deeply")
	case v.Kind == yaml.MappingNode:
		return b.pairs(v)
	case v.Kind == yaml.SequenceNode:
		var out []pair
		for _, e := range v.Content {
			if e = b.deref(e); e != nil && e.Kind == yaml.MappingNode {
				out = append(out, b.pairs(e)...)
			} else {
				b.errorf(v.Line, "<<", "merge value must be a mapping or a list of mappings")
			}
		}
		return out
	default:
		b.errorf(v.Line, "<<", "merge value must be a mapping or a list of mappings")
	}
	return nil
}

func keyText(k *yaml.Node) string {
	if k.Kind == yaml.ScalarNode {
		return k.Value
	}
	return kindName(k)
}

// unknown reports a key that has no meaning where it stands: a warning for
// keys envoyproxy/ratelimit accepts anywhere (it ignores them too), an error
// for any other key.
func (b *builder) unknown(p pair, where string) {
	if upstreamKeys[p.name] {
		b.warnings = append(b.warnings, Problem{File: b.name, Line: p.k.Line, Key: p.name,
			Msg: fmt.Sprintf("key '%s' has no effect %s; ignored", p.name, where)})
		return
	}
	b.errorf(p.k.Line, p.name, "config error, unknown key '%s'", p.name)
}

// str decodes a scalar as a string, as yaml.v2 does for string fields: any
// scalar keeps its text, null is "".
func (b *builder) str(p pair) (string, bool) {
	v := p.v
	if v.Kind != yaml.ScalarNode {
		b.errorf(v.Line, p.name, "%s must be a string, got %s", p.name, kindName(v))
		return "", false
	}
	if v.Tag == "!!null" {
		return "", true
	}
	return v.Value, true
}

// yaml11Bools are the YAML 1.1 spellings yaml.v2 (and so envoyproxy/ratelimit)
// decodes into bool fields.
var yaml11Bools = map[string]bool{
	"y": true, "Y": true, "yes": true, "Yes": true, "YES": true,
	"on": true, "On": true, "ON": true,
	"n": false, "N": false, "no": false, "No": false, "NO": false,
	"off": false, "Off": false, "OFF": false,
}

func (b *builder) boolean(p pair) bool {
	v := p.v
	if v.Kind == yaml.ScalarNode {
		switch v.Tag {
		case "!!null":
			return false
		case "!!bool":
			var x bool
			if err := v.Decode(&x); err == nil {
				return x
			}
		case "!!str":
			if x, ok := yaml11Bools[v.Value]; ok && v.Style == 0 {
				return x
			}
		}
	}
	b.errorf(v.Line, p.name, "%s must be a boolean, got %s", p.name, kindName(v))
	return false
}

func (b *builder) number(p pair, max uint64) (uint64, bool) {
	v := p.v
	if v.Kind == yaml.ScalarNode {
		switch v.Tag {
		case "!!null":
			return 0, true
		case "!!int":
			var x uint64
			if err := v.Decode(&x); err == nil {
				if x > max {
					b.errorf(v.Line, p.name, "%s must be at most %d, got %d", p.name, max, x)
					return 0, false
				}
				return x, true
			}
		}
	}
	b.errorf(v.Line, p.name, "%s must be a whole number from 0 to %d, got %s", p.name, max, kindName(v))
	return 0, false
}

// list returns the mappings of a list value; null is an empty list.
func (b *builder) list(p pair) []*yaml.Node {
	v := p.v
	if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
		return nil
	}
	if v.Kind != yaml.SequenceNode {
		b.errorf(v.Line, p.name, "%s must be a list, got %s", p.name, kindName(v))
		return nil
	}
	if !b.charge(len(v.Content)) {
		return nil
	}
	out := make([]*yaml.Node, 0, len(v.Content))
	for _, e := range v.Content {
		d := b.deref(e)
		if d == nil {
			b.errorf(e.Line, p.name, "error loading config file: alias cycle")
			continue
		}
		if d.Kind != yaml.MappingNode {
			b.errorf(d.Line, p.name, "config error, yaml file contains list of type other than map: %s", keyText(d))
			continue
		}
		out = append(out, d)
	}
	return out
}

// mapping returns a mapping value, or nil for null.
func (b *builder) mapping(p pair) *yaml.Node {
	v := p.v
	if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
		return nil
	}
	if v.Kind != yaml.MappingNode {
		b.errorf(v.Line, p.name, "%s must be a mapping, got %s", p.name, kindName(v))
		return nil
	}
	return v
}

// descriptor holds one descriptor's fields as read.
type descriptor struct {
	key, value                     string
	rateLimit, limits, descriptors *pair
	metadata                       *pair
	shadow, quota, detailed        bool
	valueToMetric, share           bool
	entity, resource, cascade      bool
}

// descriptors loads a list of descriptors under parent. parentKey is the
// stats key of the parent followed by '.'.
func (b *builder) descriptors(parent *node, parentKey string, path []Level, v *yaml.Node, name string, depth int) {
	if depth > MaxDepth {
		b.errorf(v.Line, name, "descriptors nested more than %d levels deep", MaxDepth)
		return
	}
	for _, item := range b.list(pair{k: v, v: v, name: name}) {
		b.descriptor(parent, parentKey, path, item, depth)
	}
}

func (b *builder) descriptor(parent *node, parentKey string, path []Level, item *yaml.Node, depth int) {
	var d descriptor
	keyLine := item.Line
	lines := map[string]int{}
	for _, p := range b.pairs(item) {
		p := p
		lines[p.name] = p.k.Line
		switch p.name {
		case "key":
			keyLine = p.k.Line
			d.key, _ = b.str(p)
		case "value":
			d.value, _ = b.str(p)
		case "rate_limit":
			d.rateLimit = &p
		case "limits":
			d.limits = &p
		case "descriptors":
			d.descriptors = &p
		case "metadata":
			d.metadata = &p
		case "shadow_mode":
			d.shadow = b.boolean(p)
		case "quota_mode":
			d.quota = b.boolean(p)
		case "detailed_metric":
			d.detailed = b.boolean(p)
		case "value_to_metric":
			d.valueToMetric = b.boolean(p)
		case "share_threshold":
			d.share = b.boolean(p)
		case "entity":
			d.entity = b.boolean(p)
		case "resource":
			d.resource = b.boolean(p)
		case "cascade":
			d.cascade = b.boolean(p)
		default:
			b.unknown(p, "in a descriptor")
		}
	}
	if d.key == "" {
		b.errorf(keyLine, "key", "descriptor has empty key")
		return
	}
	finalKey := d.key
	if d.value != "" {
		finalKey += "_" + d.value
	}
	fullKey := parentKey + finalKey
	lv := Level{
		Key: d.key, Value: d.value,
		Entity: d.entity, Resource: d.resource, Cascade: d.cascade,
		Wildcard:       strings.Contains(d.value, "*"),
		ShareThreshold: d.share,
		ValueToMetric:  d.valueToMetric,
	}
	if d.share && !lv.Wildcard {
		b.errorf(lines["share_threshold"], "share_threshold", "share_threshold can only be used with wildcard values (containing '*'), but found key '%s'", finalKey)
	}
	if d.cascade && !d.entity {
		b.errorf(lines["cascade"], "cascade", "cascade needs entity: true on the same descriptor")
	}
	if d.resource {
		for _, l := range path {
			if l.Resource {
				b.errorf(lines["resource"], "resource", "at most one resource level per path: '%s' is already the resource", l.Key)
				break
			}
		}
	}
	levels := make([]Level, len(path)+1)
	copy(levels, path)
	levels[len(path)] = lv

	n := &node{level: lv}
	if lv.Wildcard {
		n.pattern = d.value
	}
	var md map[string]any
	if d.metadata != nil {
		if m := b.mapping(*d.metadata); m != nil {
			md, _ = b.metadataValue(m, 0).(map[string]any)
		}
	}
	switch {
	case d.rateLimit != nil && d.limits != nil:
		b.errorf(d.limits.k.Line, "limits", "a descriptor has either rate_limit or limits, not both")
	case d.rateLimit != nil:
		if m := b.mapping(*d.rateLimit); m != nil {
			n.rule = b.rateLimit(*d.rateLimit, m)
		}
	case d.limits != nil:
		n.rule = b.limitList(*d.limits)
	}
	if r := n.rule; r != nil {
		r.Domain, r.Namespace, r.FullKey = b.domain, b.ns, fullKey
		r.ShadowMode, r.QuotaMode, r.DetailedMetric = d.shadow, d.quota, d.detailed
		r.Levels = levels
		r.File, r.Line = b.name, keyLine
		if md != nil {
			r.MetadataTree = md
			r.Metadata = map[string]string{}
			flatten(r.Metadata, "", md)
		}
		r.dynamic = r.DetailedMetric
		for _, l := range levels {
			r.shared = r.shared || l.ShareThreshold
			r.ValueToMetric = r.ValueToMetric || l.ValueToMetric
			if l.ValueToMetric && !l.ShareThreshold && (l.Value == "" || l.Wildcard) {
				r.dynamic = true
			}
		}
		b.rules = append(b.rules, r)
	}

	if d.value == "" {
		if parent.keyOnly[d.key] != nil {
			b.errorf(keyLine, "key", "duplicate descriptor composite key '%s'", fullKey)
			return
		}
		if parent.keyOnly == nil {
			parent.keyOnly = map[string]*node{}
		}
		parent.keyOnly[d.key] = n
	} else {
		pk := pairKey{d.key, d.value}
		if parent.exact[pk] != nil {
			b.errorf(keyLine, "key", "duplicate descriptor composite key '%s'", fullKey)
			return
		}
		if parent.exact == nil {
			parent.exact = map[pairKey]*node{}
		}
		parent.exact[pk] = n
		if lv.Wildcard {
			parent.wildcards = append(parent.wildcards, n)
		}
	}
	parent.children++
	if d.descriptors != nil {
		b.descriptors(n, fullKey+".", levels, d.descriptors.v, "descriptors", depth+1)
	}
}

// limitFields holds one limit's fields as read.
type limitFields struct {
	line                   int
	lines                  map[string]int
	name, unit, charge     string
	rpu, burst             uint64
	mult                   uint64
	hasMult, hasBurst, bad bool
	hasCharge              bool
}

// limitField reads a field shared by rate_limit and limits entries; it
// reports false for other keys.
func (b *builder) limitField(f *limitFields, p pair) bool {
	var ok bool
	if f.lines == nil {
		f.lines = map[string]int{}
	}
	f.lines[p.name] = p.k.Line
	switch p.name {
	case "name":
		f.name, ok = b.str(p)
	case "unit":
		f.unit, ok = b.str(p)
	case "requests_per_unit":
		f.rpu, ok = b.number(p, MaxRequestsPerUnit)
	case "unit_multiplier":
		f.mult, ok = b.number(p, math.MaxUint32)
		f.hasMult = true
	case "burst":
		f.burst, ok = b.number(p, MaxRequestsPerUnit)
		f.hasBurst = true
	case "charge":
		f.charge, ok = b.str(p)
		f.hasCharge = true
	default:
		return false
	}
	f.bad = f.bad || !ok
	return true
}

// buildLimit validates a limit's numbers and computes its bucket.
func (b *builder) buildLimit(f *limitFields, u Unit) (Limit, bool) {
	l := Limit{Name: f.name, ID: f.name, Unit: u, RequestsPerUnit: f.rpu, UnitMultiplier: 1, Burst: f.burst}
	if l.ID == "" {
		l.ID = "default"
	}
	ok := !f.bad
	if u.Duration() <= 0 {
		b.errorf(f.line, "unit", "invalid rate limit unit '%s'", f.unit)
		return l, false
	}
	if f.hasMult {
		if f.mult < 1 {
			b.errorf(f.lines["unit_multiplier"], "unit_multiplier", "unit_multiplier must be at least 1")
			ok = false
		} else if f.mult > uint64(math.MaxInt64/u.Duration()) {
			b.errorf(f.lines["unit_multiplier"], "unit_multiplier", "unit_multiplier %d makes the period too long (at most %d %s units)", f.mult, math.MaxInt64/u.Duration(), u)
			ok = false
		} else {
			l.UnitMultiplier = uint32(f.mult)
		}
	}
	if f.hasBurst {
		switch {
		case f.rpu == 0 && f.burst > 0:
			b.errorf(f.lines["burst"], "burst", "burst needs requests_per_unit of at least 1")
			ok = false
		case f.burst < f.rpu:
			b.errorf(f.lines["burst"], "burst", "burst (%d) must be at least requests_per_unit (%d)", f.burst, f.rpu)
			ok = false
		}
	}
	if f.hasCharge {
		c, valid := parseCharge(f.charge)
		if !valid {
			b.errorf(f.lines["charge"], "charge", "invalid charge '%s': want pre or post", f.charge)
			ok = false
		}
		l.Charge = c
	}
	if !ok {
		return l, false
	}
	if l.RequestsPerUnit == 0 {
		l.Deny = true
		return l, true
	}
	bucket, err := tokenbucket.Rate(l.RequestsPerUnit, l.Period(), l.Burst)
	if err != nil {
		b.errorf(f.line, "requests_per_unit", "%v", err)
		return l, false
	}
	l.Bucket = bucket
	return l, true
}

func (b *builder) rateLimit(p pair, m *yaml.Node) *Rule {
	f := limitFields{line: p.k.Line}
	var unlimited bool
	var replaces []string
	var replaceLines []int
	unitLine := p.k.Line
	for _, q := range b.pairs(m) {
		if q.name == "unit" {
			unitLine = q.k.Line
		}
		if b.limitField(&f, q) {
			continue
		}
		switch q.name {
		case "unlimited":
			unlimited = b.boolean(q)
		case "replaces":
			for _, r := range b.list(q) {
				name := ""
				for _, rp := range b.pairs(r) {
					if rp.name == "name" {
						name, _ = b.str(rp)
					} else {
						b.unknown(rp, "in a replaces entry")
					}
				}
				replaces = append(replaces, name)
				replaceLines = append(replaceLines, r.Line)
			}
		default:
			b.unknown(q, "in rate_limit")
		}
	}
	bad := false
	for i, name := range replaces {
		switch {
		case name == "":
			b.errorf(replaceLines[i], "replaces", "should not have an empty replaces entry")
			bad = true
		case name == f.name:
			b.errorf(replaceLines[i], "replaces", "replaces should not contain name of same descriptor")
			bad = true
		}
	}
	u, validUnit := ParseUnit(f.unit)
	r := &Rule{Name: f.name, Replaces: replaces}
	if unlimited {
		if validUnit {
			b.errorf(unitLine, "unit", "should not specify rate limit unit when unlimited")
			return nil
		}
		if f.hasBurst || f.hasCharge {
			b.errorf(p.k.Line, "rate_limit", "burst and charge have no meaning when unlimited")
			return nil
		}
		if bad || f.bad {
			return nil
		}
		r.Unlimited = true
		return r
	}
	if !validUnit {
		b.errorf(unitLine, "unit", "invalid rate limit unit '%s'", f.unit)
		return nil
	}
	l, ok := b.buildLimit(&f, u)
	if !ok || bad {
		return nil
	}
	r.Limits = []Limit{l}
	return r
}

func (b *builder) limitList(p pair) *Rule {
	items := b.list(p)
	if len(p.v.Content) == 0 && (p.v.Kind == yaml.SequenceNode || p.v.Tag == "!!null") {
		b.errorf(p.k.Line, "limits", "limits must not be empty")
		return nil
	}
	r := &Rule{}
	seen := map[string]bool{}
	ok := true
	for _, item := range items {
		f := limitFields{line: item.Line}
		unitLine := item.Line
		for _, q := range b.pairs(item) {
			if q.name == "unit" {
				unitLine = q.k.Line
			}
			if !b.limitField(&f, q) {
				b.errorf(q.k.Line, q.name, "config error, unknown key '%s' in limits entry", q.name)
				ok = false
			}
		}
		switch {
		case f.name == "":
			b.errorf(item.Line, "name", "limits entry needs a name")
			ok = false
			continue
		case !limitNameRE.MatchString(f.name):
			b.errorf(item.Line, "name", "invalid limit name %q: want 1 to 64 of [A-Za-z0-9_-]", f.name)
			ok = false
			continue
		case seen[f.name]:
			b.errorf(item.Line, "name", "duplicate limit name '%s'", f.name)
			ok = false
			continue
		}
		seen[f.name] = true
		u, validUnit := ParseUnit(f.unit)
		if !validUnit {
			b.errorf(unitLine, "unit", "invalid rate limit unit '%s'", f.unit)
			ok = false
			continue
		}
		l, good := b.buildLimit(&f, u)
		if !good {
			ok = false
			continue
		}
		r.Limits = append(r.Limits, l)
	}
	if !ok {
		return nil
	}
	return r
}

// metadataValue converts a metadata node to plain Go values.
func (b *builder) metadataValue(v *yaml.Node, depth int) any {
	if v = b.deref(v); v == nil {
		b.errorf(0, "metadata", "error loading config file: alias cycle")
		return nil
	}
	if depth > maxMetadataDepth {
		b.errorf(v.Line, "metadata", "metadata nested more than %d levels deep", maxMetadataDepth)
		return nil
	}
	switch v.Kind {
	case yaml.MappingNode:
		out := map[string]any{}
		for _, p := range b.pairs(v) {
			out[p.name] = b.metadataValue(p.v, depth+1)
		}
		return out
	case yaml.SequenceNode:
		if !b.charge(len(v.Content)) {
			return nil
		}
		out := make([]any, 0, len(v.Content))
		for _, e := range v.Content {
			out = append(out, b.metadataValue(e, depth+1))
		}
		return out
	}
	switch v.Tag {
	case "!!null":
		return nil
	case "!!bool":
		var x bool
		if v.Decode(&x) == nil {
			return x
		}
	case "!!int":
		var i int64
		if v.Decode(&i) == nil {
			return i
		}
		var u uint64
		if v.Decode(&u) == nil {
			return u
		}
	case "!!float":
		var f float64
		if v.Decode(&f) == nil {
			return f
		}
	}
	return v.Value
}

// flatten writes a metadata tree as dotted string keys.
func flatten(out map[string]string, prefix string, v any) {
	join := func(k string) string {
		if prefix == "" {
			return k
		}
		return prefix + "." + k
	}
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			flatten(out, join(k), e)
		}
	case []any:
		for i, e := range x {
			flatten(out, join(strconv.Itoa(i)), e)
		}
	case nil:
		out[prefix] = ""
	case string:
		out[prefix] = x
	default:
		out[prefix] = fmt.Sprint(x)
	}
}
