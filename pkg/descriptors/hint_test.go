package descriptors

import (
	"fmt"
	"strings"
	"testing"
)

// places are a descriptor file with %s where a key of each place of
// keysAt goes.
var places = map[string]string{
	"at the top level": "domain: d\ndescriptors:\n  - key: k\n%s: x\n",
	"in a descriptor":  "domain: d\ndescriptors:\n  - key: k\n    %s: x\n",
	"in rate_limit":    "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: minute\n      requests_per_unit: 1\n      %s: x\n",
	"in a replaces entry": "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: minute\n      requests_per_unit: 1\n" +
		"      replaces:\n        - %s: x\n",
	"in limits entry":               "domain: d\ndescriptors:\n  - key: k\n    limits:\n      - name: a\n        unit: minute\n        requests_per_unit: 1\n        %s: x\n",
	"in an adjustment":              "domain: d\nadjustments:\n  - limit: a\n    %s: x\n",
	"in an adjustment's cost":       "domain: d\nadjustments:\n  - limit: a\n    cost:\n      %s: x\n",
	"in cost metadata":              "domain: d\nadjustments:\n  - limit: a\n    cost:\n      metadata:\n        %s: x\n",
	"in a cost's input or output":   "domain: d\nadjustments:\n  - limit: a\n    cost:\n      input:\n        %s: x\n",
	"in an adjustment's descriptor": "domain: d\nadjustments:\n  - limit: a\n    descriptor:\n      - %s: x\n",
	"in budget":                     "domain: d\ndescriptors:\n  - key: k\n    budget:\n      total: 1\n      per: day\n      %s: x\n",
	"in prices":                     "domain: d\nprices:\n  %s: x\n",
	"in a price":                    "domain: d\nprices:\n  models:\n    m:\n      %s: x\n",
}

// TestKeysAtAreKnown: every key a hint may suggest is one the parser
// accepts where the hint suggests it.
func TestKeysAtAreKnown(t *testing.T) {
	for _, at := range keysAt {
		tmpl, ok := places[at.where]
		if !ok {
			t.Fatalf("no file for the place %q: add it to places", at.where)
		}
		for _, k := range at.keys {
			_, err := Parse([]File{{Name: "f.yaml", Data: fmt.Appendf(nil, tmpl, k)}}, Options{})
			if err != nil && strings.Contains(err.Error(), "unknown key '"+k+"'") {
				t.Errorf("key %q %s: %v; keysAt suggests it there", k, at.where, err)
			}
		}
	}
}

// TestUnknownKeyHint: a mistyped key at each place of a file is answered
// with the key it was probably meant to be; a key near none gets no hint.
func TestUnknownKeyHint(t *testing.T) {
	tests := []struct{ where, key, want string }{
		{"at the top level", "domian", "config error, unknown key 'domian'; did you mean 'domain'?"},
		{"in a descriptor", "rate_limt", "config error, unknown key 'rate_limt'; did you mean 'rate_limit'?"},
		{"in a descriptor", "valeu", "config error, unknown key 'valeu'; did you mean 'value'?"},
		{"in rate_limit", "requestsperunit", "config error, unknown key 'requestsperunit'; did you mean 'requests_per_unit'?"},
		{"in a replaces entry", "nme", "config error, unknown key 'nme'; did you mean 'name'?"},
		{"in limits entry", "brust", "config error, unknown key 'brust' in limits entry; did you mean 'burst'?"},
		{"in an adjustment", "limt", "config error, unknown key 'limt' in an adjustment; did you mean 'limit'?"},
		{"in an adjustment's cost", "trailers", "config error, unknown key 'trailers' in an adjustment's cost; did you mean 'trailer'?"},
		{"in cost metadata", "namspace", "config error, unknown key 'namspace' in cost metadata; did you mean 'namespace'?"},
		{"in an adjustment's descriptor", "vale", "config error, unknown key 'vale' in an adjustment's descriptor; did you mean 'value'?"},
		{"at the top level", "adjustment", "config error, unknown key 'adjustment'; did you mean 'adjustments'?"},
		{"in a descriptor", "zzzzzz", "config error, unknown key 'zzzzzz'\n"},
		{"in budget", "zome", "config error, unknown key 'zome' in budget; did you mean 'zone'?"},
		{"in prices", "model", "config error, unknown key 'model' in prices; did you mean 'models'?"},
		{"in a price", "outptu", "config error, unknown key 'outptu' in a price; did you mean 'output'?"},
	}
	for _, tt := range tests {
		_, err := Parse([]File{{Name: "f.yaml", Data: fmt.Appendf(nil, places[tt.where], tt.key)}}, Options{})
		if err == nil || !strings.Contains(err.Error()+"\n", tt.want) {
			t.Errorf("Parse(%q %s) = %v, want %q", tt.key, tt.where, err, tt.want)
		}
	}
}

// TestInvalidUnitListsUnits: a unit that is not one names the valid ones,
// in rate_limit and in a limits entry.
func TestInvalidUnitListsUnits(t *testing.T) {
	const units = "invalid rate limit unit 'minit': want one of second, minute, hour, day, week, month, year (any case)"
	for _, tt := range []struct{ file, want string }{
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: minit\n      requests_per_unit: 1\n", "f.yaml:5: unit: " + units},
		{"domain: d\ndescriptors:\n  - key: k\n    limits:\n      - name: a\n        unit: minit\n        requests_per_unit: 1\n", "f.yaml:6: unit: " + units},
	} {
		_, err := Parse([]File{{Name: "f.yaml", Data: []byte(tt.file)}}, Options{})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(\n%s) = %v, want %q", tt.file, err, tt.want)
		}
	}
	for _, u := range []string{"second", "minute", "hour", "day", "week", "month", "year"} {
		if _, ok := ParseUnit(u); !ok || !strings.Contains(unitList, u) {
			t.Errorf("unit %q: ParseUnit ok %v, in the list %v; want both", u, ok, strings.Contains(unitList, u))
		}
	}
}
