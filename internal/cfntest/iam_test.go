package cfntest

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// statement is one Allow statement of a managed policy.
type statement struct {
	Sid       string
	Actions   []string
	Resources []string
	// Leading is the dynamodb:LeadingKeys condition: its operator
	// (ForAllValues:StringLike or ForAllValues:StringEquals, "" for none)
	// and values, policy variables unresolved.
	Op      string
	Leading []string
	Bad     string // a part of the statement this evaluator does not model
}

// policy is a managed policy of the template.
type policy struct {
	Name       string
	Statements []statement
}

func strs(v any) []string {
	switch x := v.(type) {
	case string:
		return []string{x}
	case []any:
		var out []string
		for _, e := range x {
			out = append(out, fmt.Sprint(e))
		}
		return out
	}
	return nil
}

// policies returns the template's managed policies.
func policies(p *parsed) map[string]policy {
	out := map[string]policy{}
	for name, mp := range p.tmpl.GetAllIAMManagedPolicyResources() {
		doc, _ := mp.PolicyDocument.(map[string]any)
		pol := policy{Name: name}
		for _, s := range doc["Statement"].([]any) {
			m := s.(map[string]any)
			st := statement{Sid: fmt.Sprint(m["Sid"]), Actions: strs(m["Action"]), Resources: strs(m["Resource"])}
			if m["Effect"] != "Allow" || m["NotAction"] != nil || m["NotResource"] != nil {
				st.Bad = "not a plain Allow"
			}
			if c, ok := m["Condition"].(map[string]any); ok {
				for op, kv := range c {
					kvm, _ := kv.(map[string]any)
					for k, v := range kvm {
						if k != "dynamodb:LeadingKeys" || (op != "ForAllValues:StringLike" && op != "ForAllValues:StringEquals") || st.Op != "" {
							st.Bad = "condition " + op + " " + k
						}
						st.Op, st.Leading = op, strs(v)
					}
				}
			}
			pol.Statements = append(pol.Statements, st)
		}
		out[name] = pol
	}
	return out
}

// like is IAM's StringLike: * any run of characters, ? any one.
func like(pattern, s string) bool {
	if pattern == "" {
		return s == ""
	}
	switch pattern[0] {
	case '*':
		for i := 0; i <= len(s); i++ {
			if like(pattern[1:], s[i:]) {
				return true
			}
		}
		return false
	case '?':
		return s != "" && like(pattern[1:], s[1:])
	}
	return s != "" && s[0] == pattern[0] && like(pattern[1:], s[1:])
}

// substitute resolves ${aws:PrincipalTag/K} in v; ok is false when the
// principal has no tag K (the value then matches nothing).
func substitute(v string, tags map[string]string) (string, bool) {
	for {
		i := strings.Index(v, "${aws:PrincipalTag/")
		if i < 0 {
			return v, true
		}
		j := strings.Index(v[i:], "}")
		if j < 0 {
			return v, false
		}
		val, ok := tags[v[i+len("${aws:PrincipalTag/"):i+j]]
		if !ok {
			return v, false
		}
		v = v[:i] + val + v[i+j+1:]
	}
}

// leadingOK evaluates the statement's LeadingKeys condition for keys:
// ForAllValues holds when every key matches one of the values (and, as in
// IAM, when there is no key).
func (s statement) leadingOK(keys []string, tags map[string]string) bool {
	if s.Op == "" {
		return true
	}
	for _, k := range keys {
		matched := false
		for _, v := range s.Leading {
			pat, ok := substitute(v, tags)
			if !ok {
				continue
			}
			if s.Op == "ForAllValues:StringLike" && like(pat, k) || s.Op == "ForAllValues:StringEquals" && pat == k {
				matched = true
			}
		}
		if !matched {
			return false
		}
	}
	return true
}

// resourceOf is the ARN a call is authorized on.
func resourceOf(c call) string {
	arn := "arn:aws:dynamodb:" + fakeRegion + ":" + fakeAccount + ":table/dynalimit"
	if c.Stream {
		return arn + "/stream/2026-01-01T00:00:00.000"
	}
	if c.Index != "" {
		return arn + "/index/" + c.Index
	}
	return arn
}

func (s statement) matches(c call, tags map[string]string) bool {
	return s.Bad == "" && slices.Contains(s.Actions, c.Action) && slices.Contains(s.Resources, resourceOf(c)) && s.leadingOK(c.Keys, tags)
}

func (p policy) allows(c call, tags map[string]string) bool {
	for _, s := range p.Statements {
		if s.matches(c, tags) {
			return true
		}
	}
	return false
}

// keyed are the actions whose requests always name keys: a LeadingKeys
// condition on any other would hold vacuously.
var keyed = []string{"dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:ConditionCheckItem", "dynamodb:Query"}

var reads = []string{"dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:Query"}

const systemPK = "_/SYSTEM#"

// checkExact reports what makes pol differ from calls: a call it does not
// allow, and a grant (statement, action, resource) that no call uses.
func checkExact(pol policy, calls []call, tags map[string]string) []error {
	var errs []error
	if len(calls) == 0 {
		return []error{fmt.Errorf("%s: no call was recorded for its role", pol.Name)}
	}
	for _, c := range calls {
		if !pol.allows(c, tags) {
			errs = append(errs, fmt.Errorf("%s does not allow %s on %s, keys %q (made by %s)", pol.Name, c.Action, resourceOf(c), c.Keys, c.Step))
		}
	}
	for _, s := range pol.Statements {
		if s.Bad != "" {
			errs = append(errs, fmt.Errorf("%s %s: %s is not modelled by this test", pol.Name, s.Sid, s.Bad))
		}
		for _, a := range s.Actions {
			if s.Op != "" && !slices.Contains(keyed, a) {
				errs = append(errs, fmt.Errorf("%s %s: %s carries no keys, so its LeadingKeys condition holds always", pol.Name, s.Sid, a))
			}
			for _, r := range s.Resources {
				used := slices.ContainsFunc(calls, func(c call) bool {
					return c.Action == a && resourceOf(c) == r && s.leadingOK(c.Keys, tags)
				})
				if !used {
					errs = append(errs, fmt.Errorf("%s %s grants %s on %s, which no call of its role needs", pol.Name, s.Sid, a, r))
				}
			}
		}
	}
	return errs
}

// checkScoped checks a namespace-scoped policy with the principal tagged
// with namespace ns: each call (all of ns) is allowed; the same call on
// another namespace's prefix, or on a near miss of ns's, is denied; no
// write reaches the system records; an untagged principal reaches no item.
func checkScoped(pol policy, calls []call, tagKey, ns string) []error {
	tags := map[string]string{tagKey: ns}
	errs := checkExact(pol, calls, tags)
	own := "n" + ns + "/"
	others := []string{"nother/", "n" + ns + "-other/", "n" + ns + "x/", "n" + ns[:len(ns)-1] + "/", "n" + ns, "N" + ns + "/", "/" + own, own[:len(own)-1] + "%2F"}
	for _, c := range calls {
		if !slices.Contains(keyed, c.Action) {
			continue
		}
		var mine bool
		for _, k := range c.Keys {
			if strings.HasPrefix(k, own) {
				mine = true
			} else if k != systemPK {
				errs = append(errs, fmt.Errorf("%s: a call of namespace %s named %q", pol.Name, ns, k))
			} else if !slices.Contains(reads, c.Action) {
				errs = append(errs, fmt.Errorf("%s: %s wrote the system records", pol.Name, c.Step))
			}
		}
		if !mine {
			continue
		}
		for _, o := range others {
			m := c
			m.Keys = nil
			for _, k := range c.Keys {
				m.Keys = append(m.Keys, strings.Replace(k, own, o, 1))
			}
			if pol.allows(m, tags) {
				errs = append(errs, fmt.Errorf("%s allows %s on %q to a principal of namespace %s", pol.Name, m.Action, m.Keys, ns))
			}
			// One key outside the namespace among several denies the call.
			if len(c.Keys) > 0 {
				mixed := c
				mixed.Keys = append(slices.Clone(c.Keys), strings.Replace(c.Keys[0], own, o, 1))
				if pol.allows(mixed, tags) {
					errs = append(errs, fmt.Errorf("%s allows %s on %q (one key of another namespace)", pol.Name, mixed.Action, mixed.Keys))
				}
			}
		}
		if pol.allows(c, map[string]string{}) {
			errs = append(errs, fmt.Errorf("%s allows %s on %q to a principal without the tag %s", pol.Name, c.Action, c.Keys, tagKey))
		}
		if pol.allows(c, map[string]string{tagKey: "other"}) {
			errs = append(errs, fmt.Errorf("%s allows %s on %q to a principal of namespace other", pol.Name, c.Action, c.Keys))
		}
	}
	for _, a := range []string{"dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:ConditionCheckItem"} {
		if pol.allows(call{Action: a, Keys: []string{systemPK}}, tags) {
			errs = append(errs, fmt.Errorf("%s allows %s on the system records %s", pol.Name, a, systemPK))
		}
	}
	return errs
}

// roles maps each policy to the calls of its role and, for the scoped
// ones, says so.
type roleCalls struct {
	decide, admin, adminScoped, tableAdmin, readOnly, aggregator []call
}

// checkAll checks every policy of the template against the recorded calls.
func checkAll(t testing.TB, src []byte, rc roleCalls, ns string) []error {
	p := parse(t, src)
	pols := policies(p)
	tagKey, _ := p.tmpl.Parameters["NamespaceTagKey"].Default.(string)
	if tagKey == "" {
		return []error{fmt.Errorf("NamespaceTagKey has no default")}
	}
	want := map[string]bool{"DecidePolicy": true, "AdminPolicy": true, "TableAdminPolicy": true, "ReadOnlyPolicy": true,
		"DecideNamespacePolicy": true, "AdminNamespacePolicy": true, "ReadOnlyNamespacePolicy": true, "AggregatorPolicy": true}
	var errs []error
	for name := range pols {
		if !want[name] {
			errs = append(errs, fmt.Errorf("policy %s: no role's calls are recorded for it", name))
		}
	}
	get := func(name string) policy {
		pol, ok := pols[name]
		if !ok {
			errs = append(errs, fmt.Errorf("policy %s is missing", name))
		}
		return pol
	}
	errs = append(errs, checkExact(get("DecidePolicy"), rc.decide, nil)...)
	errs = append(errs, checkExact(get("AdminPolicy"), rc.admin, nil)...)
	errs = append(errs, checkExact(get("TableAdminPolicy"), rc.tableAdmin, nil)...)
	errs = append(errs, checkExact(get("ReadOnlyPolicy"), rc.readOnly, nil)...)
	errs = append(errs, checkExact(get("AggregatorPolicy"), rc.aggregator, nil)...)
	errs = append(errs, checkScoped(get("DecideNamespacePolicy"), rc.decide, tagKey, ns)...)
	errs = append(errs, checkScoped(get("AdminNamespacePolicy"), rc.adminScoped, tagKey, ns)...)
	errs = append(errs, checkScoped(get("ReadOnlyNamespacePolicy"), rc.readOnly, tagKey, ns)...)
	return errs
}

func TestLike(t *testing.T) {
	for _, c := range []struct {
		pat, s string
		want   bool
	}{
		{"nA/*", "nA/BUCKET#x", true},
		{"nA/*", "nA/", true},
		{"nA/*", "nA-other/BUCKET#x", false},
		{"nA/*", "nA", false},
		{"nA/*", "nB/x", false},
		{"n?/*", "nB/x", true},
		{"_/SYSTEM#", "_/SYSTEM#", true},
	} {
		if got := like(c.pat, c.s); got != c.want {
			t.Errorf("like(%q, %q) = %v, want %v", c.pat, c.s, got, c.want)
		}
	}
}
