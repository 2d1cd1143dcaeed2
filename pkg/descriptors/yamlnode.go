package descriptors

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Bounds of the YAML reader.
const (
	// maxNodes bounds the YAML nodes visited per file, aliases expanded.
	maxNodes = 1 << 20
	// maxMetadataDepth bounds nesting inside a metadata map.
	maxMetadataDepth = 32
	// maxMergeDepth bounds merge keys (<<) inside merged mappings.
	maxMergeDepth = 8
)

var yamlLineRE = regexp.MustCompile(`line (\d+)`)

// reader reads one file's yaml.v3 node tree strictly, knowing nothing of
// descriptors: keys must be strings and unique, scalars must have the
// type asked for (with yaml.v2's spellings, as envoyproxy/ratelimit reads
// them), aliases and merge keys are followed with bounds, and every node
// visited, aliases expanded, spends a per-file budget of maxNodes. Every
// problem is recorded with the file's name and the line; reading goes on, so
// that one pass reports them all.
type reader struct {
	fileName string
	problems []Problem // of every file read so far
	budget   int
	overflow bool
}

// start begins reading the file named name.
func (r *reader) start(name string) {
	r.fileName, r.budget, r.overflow = name, maxNodes, false
}

// errorf records a problem of the file, unless its node budget is spent:
// then reading it is abandoned and only that is reported.
func (r *reader) errorf(line int, key, format string, args ...any) {
	if r.overflow {
		return
	}
	r.problems = append(r.problems, Problem{File: r.fileName, Line: line, Key: key, Msg: fmt.Sprintf(format, args...)})
}

// document parses data and returns its root node with aliases followed, or
// nil (with a problem) when it does not parse; an empty document is a null
// scalar.
func (r *reader) document(data []byte) (*yaml.Node, bool) {
	var doc yaml.Node
	if err := safeUnmarshal(data, &doc); err != nil {
		line := 0
		if m := yamlLineRE.FindStringSubmatch(err.Error()); m != nil {
			line, _ = strconv.Atoi(m[1])
		}
		if l, msg := indentHint(data, err.Error(), line); l > 0 {
			r.errorf(l, "", "%s", msg)
			return nil, false
		}
		if hint := tabHint(data, line); hint != "" {
			r.errorf(line, "", "%s (%v)", hint, err)
			return nil, false
		}
		r.errorf(line, "", "error loading config file: %v", err)
		return nil, false
	}
	if doc.Kind == yaml.DocumentNode && len(doc.Content) > 0 {
		return r.deref(doc.Content[0]), true
	}
	return nil, true
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

// deref follows aliases. It returns nil for an alias cycle (more than 100
// aliases in a row); the node budget is spent by what visits the node.
func (r *reader) deref(n *yaml.Node) *yaml.Node {
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
func (r *reader) charge(n int) bool {
	r.budget -= n
	if r.budget >= 0 {
		return true
	}
	if !r.overflow {
		r.errorf(0, "", "error loading config file: more than %d YAML nodes after expanding aliases", maxNodes)
		r.overflow = true
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
func (r *reader) pairs(m *yaml.Node) []pair { return r.pairsAt(m, 0) }

// pairsAt is pairs for a mapping merged into another depth times.
func (r *reader) pairsAt(m *yaml.Node, depth int) []pair {
	if !r.charge(len(m.Content)/2 + 1) {
		return nil
	}
	var out []pair
	seen := map[string]bool{}
	var merged []pair
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := r.deref(m.Content[i]), r.deref(m.Content[i+1])
		if k == nil || v == nil {
			r.errorf(m.Content[i].Line, "", "error loading config file: alias cycle")
			continue
		}
		if k.Kind == yaml.ScalarNode && k.Tag == "!!merge" {
			merged = append(merged, r.mergePairs(v, depth+1)...)
			continue
		}
		if k.Kind != yaml.ScalarNode || k.Tag != "!!str" {
			r.errorf(k.Line, keyText(k), "config error, key is not of type string: %s", keyText(k))
			continue
		}
		if seen[k.Value] {
			r.errorf(k.Line, k.Value, "duplicate key '%s'", k.Value)
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

// mergePairs returns the pairs a merge key (<<) brings in, at depth merges
// deep; merges nested more than maxMergeDepth deep are a problem.
func (r *reader) mergePairs(v *yaml.Node, depth int) []pair {
	switch {
	case depth > maxMergeDepth:
		r.errorf(v.Line, "<<", "merge keys nested more than %d deep", maxMergeDepth)
	case v.Kind == yaml.MappingNode:
		return r.pairsAt(v, depth)
	case v.Kind == yaml.SequenceNode:
		var out []pair
		for _, e := range v.Content {
			if e = r.deref(e); e != nil && e.Kind == yaml.MappingNode {
				out = append(out, r.pairsAt(e, depth)...)
			} else {
				r.errorf(v.Line, "<<", "merge value must be a mapping or a list of mappings")
			}
		}
		return out
	default:
		r.errorf(v.Line, "<<", "merge value must be a mapping or a list of mappings")
	}
	return nil
}

func keyText(k *yaml.Node) string {
	if k.Kind == yaml.ScalarNode {
		return k.Value
	}
	return kindName(k)
}

// str decodes a scalar as a string, as yaml.v2 does for string fields: any
// scalar keeps its text, null is "".
func (r *reader) str(p pair) (string, bool) {
	v := p.v
	if v.Kind != yaml.ScalarNode {
		r.errorf(v.Line, p.name, "%s must be a string, got %s", p.name, kindName(v))
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

func (r *reader) boolean(p pair) bool {
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
	r.errorf(v.Line, p.name, "%s must be a boolean, got %s", p.name, kindName(v))
	return false
}

func (r *reader) number(p pair, max uint64) (uint64, bool) {
	v := p.v
	if v.Kind == yaml.ScalarNode {
		switch v.Tag {
		case "!!null":
			return 0, true
		case "!!int":
			var x uint64
			if err := v.Decode(&x); err == nil {
				if x > max {
					r.errorf(v.Line, p.name, "%s must be at most %d, got %d", p.name, max, x)
					return 0, false
				}
				return x, true
			}
		}
	}
	r.errorf(v.Line, p.name, "%s must be a whole number from 0 to %d, got %s", p.name, max, kindName(v))
	return 0, false
}

// list returns the mappings of a list value; null is an empty list.
func (r *reader) list(p pair) []*yaml.Node {
	v := p.v
	if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
		return nil
	}
	if v.Kind != yaml.SequenceNode {
		r.errorf(v.Line, p.name, "%s must be a list, got %s", p.name, kindName(v))
		return nil
	}
	if !r.charge(len(v.Content)) {
		return nil
	}
	out := make([]*yaml.Node, 0, len(v.Content))
	for _, e := range v.Content {
		d := r.deref(e)
		if d == nil {
			r.errorf(e.Line, p.name, "error loading config file: alias cycle")
			continue
		}
		if d.Kind != yaml.MappingNode {
			r.errorf(d.Line, p.name, "config error, yaml file contains list of type other than map: %s", keyText(d))
			continue
		}
		out = append(out, d)
	}
	return out
}

// mapping returns a mapping value, or nil for null.
func (r *reader) mapping(p pair) *yaml.Node {
	v := p.v
	if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
		return nil
	}
	if v.Kind != yaml.MappingNode {
		r.errorf(v.Line, p.name, "%s must be a mapping, got %s", p.name, kindName(v))
		return nil
	}
	return v
}

// metadataValue converts a metadata node to plain Go values.
func (r *reader) metadataValue(v *yaml.Node, depth int) any {
	if v = r.deref(v); v == nil {
		r.errorf(0, "metadata", "error loading config file: alias cycle")
		return nil
	}
	if depth > maxMetadataDepth {
		r.errorf(v.Line, "metadata", "metadata nested more than %d levels deep", maxMetadataDepth)
		return nil
	}
	switch v.Kind {
	case yaml.MappingNode:
		out := map[string]any{}
		for _, p := range r.pairs(v) {
			out[p.name] = r.metadataValue(p.v, depth+1)
		}
		return out
	case yaml.SequenceNode:
		if !r.charge(len(v.Content)) {
			return nil
		}
		out := make([]any, 0, len(v.Content))
		for _, e := range v.Content {
			out = append(out, r.metadataValue(e, depth+1))
		}
		return out
	}
	switch v.Tag {
	case "!!null":
		return nil
	case "!!bool":
		// The common spellings without yaml's reflection (which costs a
		// decoder per scalar); the rest through it.
		if x, err := strconv.ParseBool(v.Value); err == nil {
			return x
		}
		var x bool
		if v.Decode(&x) == nil {
			return x
		}
	case "!!int":
		if i, err := strconv.ParseInt(v.Value, 10, 64); err == nil {
			return i
		}
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
