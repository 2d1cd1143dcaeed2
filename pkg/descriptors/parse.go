package descriptors

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// MaxDepth bounds how deeply descriptors nest.
const MaxDepth = 64

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
	// AdjustmentsOnly loads files for the adjustments of rules that arrive
	// elsewhere (over xDS): a file's domain: and adjustments: are read, its
	// descriptors: ignored with a warning (they are not served), and the
	// limits the adjustments name are checked when Config.WithAdjustments
	// merges them with the rules.
	AdjustmentsOnly bool
}

// ValidNamespace reports whether ns may name a namespace: 1 to 64 of
// [A-Za-z0-9._-], starting with a letter or digit (NamespaceRule says so in
// words).
func ValidNamespace(ns string) bool { return namespaceRE.MatchString(ns) }

// NamespaceRule is what ValidNamespace accepts, for error messages.
const NamespaceRule = "1 to 64 of [A-Za-z0-9._-], starting with a letter or digit"

var namespaceRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

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

// rateLimitFields are rate_limit's keys, which a descriptor ignores when
// they are not indented under rate_limit.
var rateLimitFields = map[string]bool{"unit": true, "requests_per_unit": true, "unlimited": true, "unit_multiplier": true, "name": true, "replaces": true}

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
	adjust := b.resolveAdjustments()
	b.checkMoney()
	if len(b.problems) > 0 {
		return nil, &Error{Problems: b.problems, descriptorDir: b.bootstrapHint()}
	}
	return &Config{
		domains:  b.domains,
		names:    sortedDomains(b.domains),
		rules:    b.rules,
		warnings: b.warnings,
		adjust:   adjust,
		prices:   b.prices,
	}, nil
}

// resolveAdjustments checks every domain's adjustments against its rules,
// unless the files hold adjustments only.
func (b *builder) resolveAdjustments() map[string]*adjustments {
	if b.opts.AdjustmentsOnly || len(b.adjust) == 0 {
		return b.adjust
	}
	byDomain := rulesByDomain(b.rules)
	out := make(map[string]*adjustments, len(b.adjust))
	for _, d := range sortedKeys(b.adjust) {
		a, problems := resolve(d, b.adjust[d].list, byDomain[d])
		b.problems = append(b.problems, problems...)
		out[d] = a
	}
	return out
}

// builder reads descriptor files with the strict YAML reader (yamlnode.go)
// and compiles their schema into the lookup tree, accumulating every
// problem across files.
type builder struct {
	reader
	opts     Options
	domains  map[string]*node
	rules    []*Rule
	warnings []Problem
	adjust   map[string]*adjustments // as read, by domain
	prices   map[string]*PriceTable  // by domain

	// per file
	ns     string
	domain string

	// bootstraps are the indexes in problems of files that are Envoy
	// bootstraps; descFiles the names of files that are descriptor files
	// without a problem.
	bootstraps []int
	descFiles  []string
}

// envoyBootstrapKeys are top-level fields of Envoy's Bootstrap message.
var envoyBootstrapKeys = map[string]bool{
	"node": true, "static_resources": true, "dynamic_resources": true, "cluster_manager": true,
	"hds_config": true, "flags_path": true, "stats_sinks": true, "stats_config": true,
	"stats_flush_interval": true, "watchdog": true, "watchdogs": true, "tracing": true,
	"layered_runtime": true, "admin": true, "overload_manager": true, "enable_dispatcher_stats": true,
	"header_prefix": true, "stats_server_version_override": true, "use_tcp_for_dns_lookups": true,
	"bootstrap_extensions": true, "fatal_actions": true, "default_socket_interface": true,
	"inline_headers": true, "typed_dns_resolver_config": true, "default_regex_engine": true,
	"application_log_config": true, "node_context_params": true, "dns_resolution_config": true,
}

// bootstrapKeys returns the Envoy bootstrap fields at the top of a mapping
// that has neither 'domain' nor 'descriptors' (nil when it has one of them,
// or no bootstrap field): such a file is an Envoy bootstrap put in the
// descriptor directory, which every loader refuses anyway.
func bootstrapKeys(root *yaml.Node) []string {
	var keys []string
	for i := 0; i+1 < len(root.Content); i += 2 {
		k := root.Content[i].Value
		if k == "domain" || k == "descriptors" {
			return nil
		}
		if envoyBootstrapKeys[k] {
			keys = append(keys, k)
		}
	}
	return keys
}

// bootstrapHint says, in each Envoy bootstrap's problem, where the
// descriptor files of the same load are (their common directory), and
// returns that directory ("" when there are none).
func (b *builder) bootstrapHint() string {
	if len(b.bootstraps) == 0 || len(b.descFiles) == 0 {
		return ""
	}
	dir := filepath.Dir(b.descFiles[0])
	for _, f := range b.descFiles[1:] {
		for !within(f, dir) {
			dir = filepath.Dir(dir)
		}
	}
	if dir == "." || dir == string(filepath.Separator) {
		return ""
	}
	for _, i := range b.bootstraps {
		b.problems[i].Msg += " (the descriptor files here are in " + dir + ")"
	}
	return dir
}

// within reports whether path is dir or under it.
func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

func (b *builder) file(f File) {
	b.start(f.Name)
	b.ns, b.domain = "", "" // no namespace: key, the deployment's
	root, ok := b.document(f.Data)
	if !ok {
		return
	}
	if root == nil || (root.Kind == yaml.ScalarNode && root.Tag == "!!null") {
		b.errorf(1, "domain", "config file cannot have empty domain")
		return
	}
	if root.Kind != yaml.MappingNode {
		b.errorf(root.Line, "", "error loading config file: the document must be a mapping, got %s", kindName(root))
		return
	}
	if keys := bootstrapKeys(root); keys != nil {
		b.bootstraps = append(b.bootstraps, len(b.problems))
		b.errorf(root.Line, "", "this is an Envoy bootstrap (top-level %s), not a descriptor file; descriptor files have 'domain:' and 'descriptors:'", strings.Join(keys, ", "))
		return
	}
	problemsBefore := len(b.problems)
	defer func() {
		if b.domain != "" && len(b.problems) == problemsBefore {
			b.descFiles = append(b.descFiles, b.fileName)
		}
	}()
	var descNode, adjNode, priceNode *yaml.Node
	var adjPair, pricePair pair
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
		case "adjustments":
			adjNode, adjPair = p.v, p
		case "prices":
			priceNode, pricePair = p.v, p
		case "namespace":
			if s, ok := b.str(p); ok {
				if !namespaceRE.MatchString(s) {
					b.errorf(p.k.Line, p.name, "invalid namespace %q: want %s", s, NamespaceRule)
				} else {
					b.ns = s
				}
			}
		default:
			b.unknown(p, "at the top level")
		}
	}
	if adjNode != nil {
		b.adjustmentList(adjPair)
	}
	if priceNode != nil {
		b.priceList(pricePair)
	}
	if b.opts.AdjustmentsOnly {
		if descNode != nil {
			// The rules arrive over xDS; a file's own are not served, as
			// envoyproxy/ratelimit ignores the directory then.
			b.warnings = append(b.warnings, Problem{File: b.fileName, Line: root.Line, Key: "descriptors",
				Msg: "the rules arrive over xDS: this file's descriptors are ignored, its adjustments kept"})
		}
		if b.domain == "" {
			b.errorf(domainLine, "domain", "config file cannot have empty domain")
		}
		return
	}
	if (adjNode != nil || priceNode != nil) && descNode == nil && b.domain != "" {
		return // adjustments or prices for a domain whose rules are in another file
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
		b.descriptors(root2, b.domain+".", nil, nil, descNode, "descriptors", 1)
	}
}

// unknown reports a key that has no meaning where it stands: a warning for
// keys envoyproxy/ratelimit accepts anywhere (it ignores them too), an error
// for any other key.
func (b *builder) unknown(p pair, where string) {
	if upstreamKeys[p.name] {
		b.warnings = append(b.warnings, Problem{File: b.fileName, Line: p.k.Line, Key: p.name,
			Msg: fmt.Sprintf("key '%s' has no effect %s; ignored", p.name, where)})
		return
	}
	b.errorf(p.k.Line, p.name, "config error, unknown key '%s'%s", p.name, didYouMean(p.name, where))
}

// descriptor holds one descriptor's fields as read.
type descriptor struct {
	key, value                     string
	rateLimit, limits, descriptors *pair
	budget                         *pair
	metadata                       *pair
	shadow, quota, detailed        bool
	valueToMetric, share           bool
	entity, resource, cascade      bool

	keyLine int            // the line of key (of the item when it has none)
	lines   map[string]int // field name → the line it is on
}

// descriptors loads a list of descriptors under parent. parentKey is the
// stats key of the parent followed by '.'.
func (b *builder) descriptors(parent *node, parentKey string, path []Level, above []*Rule, v *yaml.Node, name string, depth int) {
	if depth > MaxDepth {
		b.errorf(v.Line, name, "descriptors nested more than %d levels deep", MaxDepth)
		return
	}
	for _, item := range b.list(pair{k: v, v: v, name: name}) {
		b.descriptor(parent, parentKey, path, above, item, depth)
	}
}

// descriptor loads one descriptor under parent; path holds the levels above
// it and above the rules of their nodes (nil where a node has none). It
// decodes the item, checks its level against the path, builds the rule of
// its node, indexes the node under parent, and loads the descriptors
// beneath it.
func (b *builder) descriptor(parent *node, parentKey string, path []Level, above []*Rule, item *yaml.Node, depth int) {
	d := b.decodeDescriptor(item)
	if d.key == "" {
		b.errorf(d.keyLine, "key", "descriptor has empty key")
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
	b.checkLevel(d, lv, path, finalKey)
	levels := make([]Level, len(path)+1)
	copy(levels, path)
	levels[len(path)] = lv

	n := &node{level: lv}
	if lv.Wildcard {
		n.pattern = d.value
	}
	n.rule = b.descriptorRule(d, levels, above, fullKey)
	if !b.index(parent, n, d, fullKey) {
		return
	}
	if d.descriptors != nil {
		rules := make([]*Rule, len(above)+1)
		copy(rules, above)
		rules[len(above)] = n.rule
		b.descriptors(n, fullKey+".", levels, rules, d.descriptors.v, "descriptors", depth+1)
	}
}

// decodeDescriptor reads the fields of one descriptor item, reporting the
// unknown ones.
func (b *builder) decodeDescriptor(item *yaml.Node) descriptor {
	d := descriptor{keyLine: item.Line, lines: map[string]int{}}
	for _, p := range b.pairs(item) {
		p := p
		d.lines[p.name] = p.k.Line
		switch p.name {
		case "key":
			d.keyLine = p.k.Line
			d.key, _ = b.str(p)
		case "value":
			d.value, _ = b.str(p)
		case "rate_limit":
			d.rateLimit = &p
		case "limits":
			d.limits = &p
		case "budget":
			d.budget = &p
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
			where := "in a descriptor"
			if rateLimitFields[p.name] {
				where += " (rate_limit's fields go indented under rate_limit:)"
			}
			b.unknown(p, where)
		}
	}
	return d
}

// checkLevel reports the flags of level lv (descriptor d's) that do not go
// together, or that the levels of path above it rule out: a chain of more
// than MaxChain entities, a second resource.
func (b *builder) checkLevel(d descriptor, lv Level, path []Level, finalKey string) {
	if d.share && !lv.Wildcard {
		b.errorf(d.lines["share_threshold"], "share_threshold", "share_threshold can only be used with wildcard values (containing '*'), but found key '%s'", finalKey)
	}
	if d.cascade && !d.entity {
		b.errorf(d.lines["cascade"], "cascade", "cascade needs entity: true on the same descriptor")
	}
	if d.entity && d.resource {
		b.errorf(d.lines["resource"], "resource", "a level names either an entity or the resource, not both")
	}
	if d.entity {
		n := 1
		for _, l := range path {
			if l.Entity {
				n++
			}
		}
		if n > MaxChain {
			b.errorf(d.lines["entity"], "entity", "a chain holds at most %d entity levels; this is level %d of this path", MaxChain, n)
		}
	}
	if d.resource {
		for _, l := range path {
			if l.Resource {
				b.errorf(d.lines["resource"], "resource", "at most one resource level per path: '%s' is already the resource", l.Key)
				break
			}
		}
	}
}

// descriptorRule builds the rule of descriptor d, nil when it has none,
// and adds it to the builder's rules. levels ends with d's own; above are
// the rules of the nodes above it.
func (b *builder) descriptorRule(d descriptor, levels []Level, above []*Rule, fullKey string) *Rule {
	var md map[string]any
	if d.metadata != nil {
		if m := b.mapping(*d.metadata); m != nil {
			md, _ = b.metadataValue(m, 0).(map[string]any)
		}
	}
	var r *Rule
	switch {
	case d.rateLimit != nil && d.limits != nil:
		b.errorf(d.limits.k.Line, "limits", "a descriptor has either rate_limit or limits, not both")
	case d.budget != nil && (d.rateLimit != nil || d.limits != nil):
		b.errorf(d.budget.k.Line, "budget", "a descriptor has one of rate_limit, limits and budget (a limits entry can hold a budget)")
	case d.budget != nil:
		r = b.budgetRule(*d.budget)
	case d.rateLimit != nil:
		if m := b.mapping(*d.rateLimit); m != nil {
			r = b.rateLimit(*d.rateLimit, m)
		}
	case d.limits != nil:
		r = b.limitList(*d.limits)
	}
	if r == nil {
		return nil
	}
	r.Domain, r.Namespace, r.FullKey = b.domain, b.ns, fullKey
	r.ShadowMode, r.QuotaMode, r.DetailedMetric = d.shadow, d.quota, d.detailed
	r.Levels = levels
	r.File, r.Line = b.fileName, d.keyLine
	r.chain(above)
	r.Priced = r.money()
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
	return r
}

// index makes n, descriptor d's node, a child of parent: by key alone when
// d has no value, else by key and value (and among the wildcards when the
// value has a '*'). It reports a composite key parent already has, and
// returns false then.
func (b *builder) index(parent, n *node, d descriptor, fullKey string) bool {
	if d.value == "" {
		if parent.keyOnly[d.key] != nil {
			b.errorf(d.keyLine, "key", "duplicate descriptor composite key '%s'", fullKey)
			return false
		}
		if parent.keyOnly == nil {
			parent.keyOnly = map[string]*node{}
		}
		parent.keyOnly[d.key] = n
	} else {
		pk := pairKey{d.key, d.value}
		if parent.exact[pk] != nil {
			b.errorf(d.keyLine, "key", "duplicate descriptor composite key '%s'", fullKey)
			return false
		}
		if parent.exact == nil {
			parent.exact = map[pairKey]*node{}
		}
		parent.exact[pk] = n
		if n.level.Wildcard {
			parent.wildcards = append(parent.wildcards, n)
		}
	}
	parent.children++
	return true
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
