package cfntest

import (
	"testing"

	"gopkg.in/yaml.v3"
)

// tableProperties returns the Properties mapping of the template's Table in
// the YAML document doc.
func tableProperties(t testing.TB, doc *yaml.Node) *yaml.Node {
	t.Helper()
	props := mapValue(mapValue(mapValue(doc.Content[0], "Resources"), "Table"), "Properties")
	if props == nil {
		t.Fatal("no Resources.Table.Properties in the template")
	}
	return props
}

// mapValue returns the value of key in mapping m, nil when there is none.
func mapValue(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// withoutWarmThroughput returns src without the Table's WarmThroughput,
// which goformation (its last release predates the property) refuses as an
// unknown field; TestWarmThroughput checks the property itself.
func withoutWarmThroughput(t testing.TB, src []byte) []byte {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		t.Fatal(err)
	}
	props := tableProperties(t, &doc)
	for i := 0; i+1 < len(props.Content); i += 2 {
		if props.Content[i].Value == "WarmThroughput" {
			props.Content = append(props.Content[:i], props.Content[i+2:]...)
			break
		}
	}
	out, err := yaml.Marshal(&doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestWarmThroughput: the Table is pre-warmed (WarmThroughput) only when a
// parameter asks for it, with the units of the parameters that do; each
// parameter defaults to 0 (a new on-demand table's warm throughput) and
// each condition is its parameter not 0. cfn-lint (TestCfnLint) checks the
// property against CloudFormation's schema.
func TestWarmThroughput(t *testing.T) {
	var doc yaml.Node
	if err := yaml.Unmarshal(readTemplate(t), &doc); err != nil {
		t.Fatal(err)
	}
	root := doc.Content[0]
	w := mapValue(tableProperties(t, &doc), "WarmThroughput")
	if w == nil {
		t.Fatal("the Table has no WarmThroughput")
	}
	params := map[string]string{"HasWarmWrites": "WarmWriteUnitsPerSecond", "HasWarmReads": "WarmReadUnitsPerSecond"}
	for cond, param := range params {
		c := mapValue(mapValue(root, "Conditions"), cond)
		if c == nil || c.Tag != "!Not" || len(c.Content) != 1 || c.Content[0].Tag != "!Equals" ||
			len(c.Content[0].Content) != 2 || c.Content[0].Content[0].Value != param || c.Content[0].Content[1].Value != "0" {
			t.Errorf("condition %s: want !Not [!Equals [!Ref %s, 0]]", cond, param)
		}
		if d := mapValue(mapValue(mapValue(root, "Parameters"), param), "Default"); d == nil || d.Value != "0" {
			t.Errorf("parameter %s: want a default of 0 (not pre-warmed)", param)
		}
	}
	for _, c := range []struct{ writes, reads bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
		got := resolveIf(t, w, map[string]bool{"HasWarmWrites": c.writes, "HasWarmReads": c.reads})
		if !c.writes && !c.reads {
			if got.Tag != "!Ref" || got.Value != "AWS::NoValue" {
				t.Errorf("no parameter set: WarmThroughput %s %s, want !Ref AWS::NoValue", got.Tag, got.Value)
			}
			continue
		}
		for field, want := range map[string]struct {
			set   bool
			param string
		}{"WriteUnitsPerSecond": {c.writes, "WarmWriteUnitsPerSecond"}, "ReadUnitsPerSecond": {c.reads, "WarmReadUnitsPerSecond"}} {
			v := mapValue(got, field)
			switch {
			case want.set && (v == nil || v.Tag != "!Ref" || v.Value != want.param):
				t.Errorf("writes %v, reads %v: WarmThroughput.%s: want !Ref %s", c.writes, c.reads, field, want.param)
			case !want.set && v != nil:
				t.Errorf("writes %v, reads %v: WarmThroughput.%s set, want it absent", c.writes, c.reads, field)
			}
		}
	}
}

// resolveIf resolves the !If of n, nested ones too, by conds (a condition
// not in conds fails t).
func resolveIf(t *testing.T, n *yaml.Node, conds map[string]bool) *yaml.Node {
	t.Helper()
	for n.Tag == "!If" {
		if len(n.Content) != 3 {
			t.Fatalf("!If of %d items, want 3", len(n.Content))
		}
		v, ok := conds[n.Content[0].Value]
		if !ok {
			t.Fatalf("!If on %q, want one of %v", n.Content[0].Value, conds)
		}
		if v {
			n = n.Content[1]
		} else {
			n = n.Content[2]
		}
	}
	return n
}
