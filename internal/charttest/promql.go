package charttest

import (
	"regexp"
	"slices"
	"strings"
)

var (
	promString   = regexp.MustCompile("\"(?:[^\"\\\\]|\\\\.)*\"|'(?:[^'\\\\]|\\\\.)*'|`[^`]*`")
	promMatchers = regexp.MustCompile(`\{[^{}]*\}`)
	promRange    = regexp.MustCompile(`\[[^\[\]]*\]`)
	// A grouping or vector-matching clause lists label names, not metrics.
	promGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)`)
	promIdent    = regexp.MustCompile(`[$]?[a-zA-Z_:][a-zA-Z0-9_:]*(\s*\()?`)
)

// promKeywords are the PromQL words that are neither metrics nor functions.
var promKeywords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"bool": true, "and": true, "or": true, "unless": true, "offset": true, "atan2": true,
	"inf": true, "nan": true, "Inf": true, "NaN": true,
}

// MetricNames returns the metric names a PromQL expression selects, sorted
// and without repeats: identifiers outside strings, label matchers, range
// selectors and grouping clauses that are not keywords, functions
// (followed by a parenthesis) or Grafana variables ($name).
func MetricNames(expr string) []string {
	expr = promString.ReplaceAllString(expr, `""`)
	expr = promMatchers.ReplaceAllString(expr, " ")
	expr = promRange.ReplaceAllString(expr, " ")
	expr = promGrouping.ReplaceAllString(expr, " ")
	var names []string
	for _, loc := range promIdent.FindAllStringSubmatchIndex(expr, -1) {
		word := expr[loc[0]:loc[1]]
		if loc[2] >= 0 || strings.HasPrefix(word, "$") || promKeywords[word] {
			continue // a function, a variable or a keyword
		}
		if loc[0] > 0 && isNumberByte(expr[loc[0]-1]) {
			continue // the unit of a number or a duration (5m, 1e3)
		}
		names = append(names, word)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

func isNumberByte(c byte) bool { return c >= '0' && c <= '9' || c == '.' }

// Family is a metric family the binary exports: its name and Prometheus
// type ("counter", "gauge", "histogram", "summary", "untyped").
type Family struct {
	Name, Type string
}

// Resolve returns the family a series name belongs to: the family of that
// name, or for name_bucket, name_sum and name_count the histogram (or, for
// _sum and _count, summary) of the base name. ok is false when it belongs
// to none.
func Resolve(name string, families map[string]string) (family string, ok bool) {
	if _, ok := families[name]; ok {
		return name, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, found := strings.CutSuffix(name, suffix)
		if !found {
			continue
		}
		switch families[base] {
		case "histogram":
			return base, true
		case "summary":
			if suffix != "_bucket" {
				return base, true
			}
		}
	}
	return "", false
}
