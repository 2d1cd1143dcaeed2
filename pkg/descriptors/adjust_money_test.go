package descriptors

import (
	"reflect"
	"strings"
	"testing"
)

// moneyRules is a domain with a price table, a daily budget in dollars and
// a token limit beside it.
const moneyRules = `domain: llm
prices:
  models:
    gpt-4o: {input: 3, output: 15}
descriptors:
  - key: tenant
    entity: true
    limits:
      - {name: tpm, unit: minute, requests_per_unit: 100000}
      - name: daily_usd
        budget: {usd: 50, per: day}
adjustments:
`

// TestMoneyAdjustmentParse: a money limit's cost is its input and output
// sources, each any of the three forms; /rlconfig writes both.
func TestMoneyAdjustmentParse(t *testing.T) {
	adj := "  - limit: daily_usd\n    cost:\n      input: {metadata: {namespace: io.envoy.ai_gateway, key: llm_input_token}}\n      output: {header: X-Output-Tokens}\n" +
		"  - limit: tpm\n    cost: {header: x-llm-tokens}\n"
	c, err := Parse([]File{{Name: "f.yaml", Data: []byte(moneyRules + adj)}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := []Adjustment{
		{Limit: "daily_usd", Input: CostSource{MetadataNamespace: "io.envoy.ai_gateway", MetadataKey: "llm_input_token"},
			Output: CostSource{Header: "x-output-tokens"}, File: "f.yaml", Line: 13},
		{Limit: "tpm", Cost: CostSource{Header: "x-llm-tokens"}, File: "f.yaml", Line: 17},
	}
	if got := c.Adjustments("llm"); !reflect.DeepEqual(got, want) {
		t.Fatalf("Adjustments(llm) =\n%+v\nwant\n%+v", got, want)
	}
	if !want[0].Split() || want[1].Split() {
		t.Errorf("Split() = %v, %v; want true, false", want[0].Split(), want[1].Split())
	}
	if a, ok := c.AdjustmentFor(c.Rules()[0], "daily_usd"); !ok || !a.Split() {
		t.Errorf("AdjustmentFor(daily_usd) = %+v, %v; want the split adjustment", a, ok)
	}
	line := "llm adjustment daily_usd: cost=input metadata io.envoy.ai_gateway/llm_input_token, output header x-output-tokens (f.yaml:13)\n"
	if d := c.Dump(); !strings.Contains(d, line) {
		t.Errorf("Dump() lacks %q:\n%s", line, d)
	}
}

// TestMoneyAdjustmentErrors: each wrong cost is reported with its file,
// line and key.
func TestMoneyAdjustmentErrors(t *testing.T) {
	for _, tt := range []struct{ adj, want string }{
		{"  - {limit: daily_usd, cost: {header: x}}\n",
			"f.yaml:13: cost: the limit 'daily_usd' of rule llm.tenant is in dollars: its cost is {input: SOURCE, output: SOURCE}"},
		{"  - {limit: tpm, cost: {input: {header: a}, output: {header: b}}}\n",
			"f.yaml:13: cost: cost has input and output, which only a limit in dollars takes; the limit 'tpm' of rule llm.tenant is not"},
		{"  - {limit: daily_usd, cost: {input: {header: a}}}\n",
			"f.yaml:13: cost: cost has no output: a money limit's cost needs both input and output"},
		{"  - {limit: daily_usd, cost: {output: {header: a}}}\n",
			"f.yaml:13: cost: cost has no input"},
		{"  - {limit: daily_usd, cost: {input: {header: a}, output: {header: b}, header: c}}\n",
			"f.yaml:13: header: cost has input and output and header"},
		{"  - {limit: daily_usd, cost: {input: {header: a, trailer: b}, output: {header: b}}}\n",
			"f.yaml:13: input: input has header and trailer; want exactly one source"},
		{"  - {limit: daily_usd, cost: {input: {}, output: {header: b}}}\n",
			"f.yaml:13: input: input needs one source: header, trailer or metadata"},
		{"  - {limit: daily_usd, cost: {input: , output: {header: b}}}\n",
			"f.yaml:13: input: input needs one source"},
		{"  - {limit: daily_usd, cost: {input: {heder: a}, output: {header: b}}}\n",
			"unknown key 'heder' in a cost's input or output; did you mean 'header'?"},
		{"  - {limit: daily_usd, cost: {inptu: {header: a}, output: {header: b}}}\n",
			"unknown key 'inptu' in an adjustment's cost; did you mean 'input'?"},
		{"  - {limit: daily_usd, cost: {input: {header: a b}, output: {header: b}}}\n",
			"f.yaml:13: header: invalid header name \"a b\""},
	} {
		_, err := Parse([]File{{Name: "f.yaml", Data: []byte(moneyRules + tt.adj)}}, Options{})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%s) = %v\nwant %q", tt.adj, err, tt.want)
		}
	}
}

// TestMoneyAdjustmentsOverXDS: adjustments merged onto pushed rules are
// checked the same way: a count on a money limit is left out with why.
func TestMoneyAdjustmentsOverXDS(t *testing.T) {
	rules, err := Parse([]File{{Name: "rules.yaml", Data: []byte(moneyRules)}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	adj, err := Parse([]File{{Name: "adj.yaml", Data: []byte("domain: llm\nadjustments:\n  - {limit: daily_usd, cost: {header: x}}\n" +
		"  - {limit: tpm, cost: {header: x}}\n")}}, Options{AdjustmentsOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	c, problems := rules.WithAdjustments(adj)
	if len(problems) != 1 || problems[0].Key != "cost" || problems[0].Line != 3 || !strings.Contains(problems[0].Msg, "is in dollars") {
		t.Fatalf("WithAdjustments problems = %v, want the money limit's", problems)
	}
	if got := c.Adjustments("llm"); len(got) != 1 || got[0].Limit != "tpm" {
		t.Errorf("Adjustments(llm) = %+v, want tpm's only", got)
	}
}
