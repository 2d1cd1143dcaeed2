package descriptors_test

import (
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/dynalimit/dynalimit/pkg/descriptors"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

const budgetYAML = `domain: llm
prices:
  models:
    gpt-4o: {input: 3, output: 15}
    gpt-4o-mini: {input: "0.15", output: "0.60", request: "0.0001"}
  default: {input: 10, output: 30}
descriptors:
  - key: tenant
    entity: true
    budget: {name: daily_usd, usd: 50, per: day, zone: America/New_York}
    descriptors:
      - key: team
        entity: true
        limits:
          - name: monthly_usd
            budget: {usd: "2000", per: month, debt: forgive}
          - name: monthly_requests
            budget: {total: 100000, per: month, zone: Europe/Paris, charge: post}
`

func TestParseBudgets(t *testing.T) {
	cfg, err := descriptors.Parse([]descriptors.File{{Name: "llm.yaml", Data: []byte(budgetYAML)}}, descriptors.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m, ok := cfg.Match("llm", []descriptors.Entry{{Key: "tenant", Value: "acme"}})
	if !ok {
		t.Fatal("no match")
	}
	l := m.Rule.Limits[0]
	if !l.IsBudget() || !l.Money || l.ID != "daily_usd" || l.RequestsPerUnit != 50_000_000 || l.Unit != descriptors.Day ||
		l.Bucket.Calendar.String() != "day@America/New_York" || !l.Bucket.Carries() {
		t.Errorf("daily budget: %+v", l)
	}
	m, _ = cfg.Match("llm", []descriptors.Entry{{Key: "tenant", Value: "acme"}, {Key: "team", Value: "ml"}})
	usd, req := m.Rule.Limits[0], m.Rule.Limits[1]
	if usd.RequestsPerUnit != 2_000_000_000 || usd.Bucket.Carries() || usd.Unit != descriptors.Month || usd.Bucket.Calendar.Zone() != "UTC" {
		t.Errorf("monthly budget: %+v", usd)
	}
	if req.Money || req.RequestsPerUnit != 100000 || req.Charge != descriptors.ChargePost || req.Bucket.Calendar.String() != "month@Europe/Paris" {
		t.Errorf("request budget: %+v", req)
	}
	pt := cfg.Prices("llm")
	if pt == nil || pt.ResourceKey != "model" || pt.InputKey != "llm_input_token" || pt.OutputKey != "llm_output_token" {
		t.Fatalf("prices: %+v", pt)
	}
	if p, _ := pt.PriceOf("gpt-4o-mini"); p != (descriptors.Price{Input: 150_000, Output: 600_000, Request: 100}) {
		t.Errorf("gpt-4o-mini: %+v", p)
	}
	if p, ok := pt.PriceOf("unknown"); !ok || p.Input != 10_000_000 {
		t.Errorf("default: %+v", p)
	}
}

func TestParseBudgetErrors(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"budget: {total: 5, usd: 1, per: day}", "either total (requests or tokens) or usd"},
		{"budget: {per: day}", "either total (requests or tokens) or usd"},
		{"budget: {total: 5, per: fortnight}", "invalid per 'fortnight': want one of minute, hour, day, week, month"},
		{"budget: {total: 5, per: day, zone: Mars/Olympus}", "invalid zone 'Mars/Olympus'"},
		{"budget: {total: 5, per: day, debt: pardon}", "invalid debt 'pardon': want carry or forgive"},
		{"budget: {usd: 1.2345678, per: day}", "invalid usd '1.2345678'"},
		{"budget: {usd: -1, per: day}", "invalid usd '-1'"},
		{"budget: {usd: 1, per: day}", "limit 'default' is in dollars but domain 'd' has no prices"},
		{"budget: {total: 0, per: day}", "total must be at least 1"},
		{"budget: {total: 1, per: day}\n    rate_limit: {unit: second, requests_per_unit: 1}", "one of rate_limit, limits and budget"},
		{"limits:\n      - name: a\n        unit: day\n        budget: {total: 1, per: day}", "holds only its name beside it"},
	} {
		data := "domain: d\ndescriptors:\n  - key: k\n    " + c.yaml + "\n"
		_, err := descriptors.Parse([]descriptors.File{{Name: "f.yaml", Data: []byte(data)}}, descriptors.Options{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", c.yaml, err, c.want)
		}
	}
	for _, c := range []struct{ yaml, want string }{
		{"prices:\n  models:\n    m: {input: 1.5e3}", "invalid input price '1.5e3'"},
		{"prices:\n  input_key: model", "must differ"},
		{"prices:\n  default: {}", "a price needs input, output or request"},
	} {
		data := "domain: d\n" + c.yaml + "\n"
		_, err := descriptors.Parse([]descriptors.File{{Name: "f.yaml", Data: []byte(data)}}, descriptors.Options{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", c.yaml, err, c.want)
		}
	}
	two := []descriptors.File{{Name: "a.yaml", Data: []byte("domain: d\nprices: {default: {input: 1}}\n")},
		{Name: "b.yaml", Data: []byte("domain: d\nprices: {default: {input: 2}}\n")}}
	if _, err := descriptors.Parse(two, descriptors.Options{}); err == nil || !strings.Contains(err.Error(), "already has prices (a.yaml:2)") {
		t.Errorf("two price tables: %v", err)
	}
}

func TestUSD(t *testing.T) {
	for s, want := range map[string]int64{"50": 50_000_000, "0.15": 150_000, "2000.000001": 2_000_000_001, "0": 0, "1.": 1_000_000} {
		if got, ok := descriptors.ParseUSD(s); !ok || got != want {
			t.Errorf("ParseUSD(%q) = %d, %v", s, got, ok)
		}
	}
	for _, s := range []string{"", ".5", "-1", "1e3", "1.0000001", "1,5", "99999999999", " 1"} {
		if _, ok := descriptors.ParseUSD(s); ok {
			t.Errorf("ParseUSD(%q) accepted", s)
		}
	}
	for micros, want := range map[int64]string{50_000_000: "50.00", 150_000: "0.15", 1: "0.000001", -800_000: "-0.80", 0: "0.00", 1_234_560: "1.23456"} {
		if got := descriptors.FormatUSD(micros); got != want {
			t.Errorf("FormatUSD(%d) = %q, want %q", micros, got, want)
		}
	}
}

// The example: 100k input and 40k output tokens at $3 and $15 per
// million cost $0.90.
func TestPriceCost(t *testing.T) {
	p := descriptors.Price{Input: 3_000_000, Output: 15_000_000}
	if got := p.Cost(100_000, 40_000); got != 900_000*tokenbucket.PerToken {
		t.Errorf("cost %d nano-dollars, want 900000000", got)
	}
	if got := (descriptors.Price{Input: 1}).Cost(1, 0); got != 1 {
		t.Errorf("a millionth of a micro-dollar rounds up to %d", got)
	}
	if got := (descriptors.Price{Request: 7}).Estimate(0); got != 0 {
		t.Errorf("a check costs %d", got)
	}
	if got := (descriptors.Price{Input: descriptors.MaxMicros}).Cost(1<<63, 1<<63); got != tokenbucket.MaxMillitokens {
		t.Errorf("no saturation: %d", got)
	}
}

// Property: what is charged is, to the nano-dollar, the exact price rounded
// up once per request, and summed over requests it is the sum of the
// priced reports.
func TestPriceCostProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		p := descriptors.Price{Input: r.Int64N(100_000_000), Output: r.Int64N(100_000_000), Request: r.Int64N(10_000)}
		in, out := r.Uint64N(10_000_000), r.Uint64N(10_000_000)
		exact := new(big.Int).Add(new(big.Int).Mul(big.NewInt(int64(in)), big.NewInt(p.Input)),
			new(big.Int).Mul(big.NewInt(int64(out)), big.NewInt(p.Output)))
		q, m := new(big.Int).DivMod(exact, big.NewInt(1000), new(big.Int))
		if m.Sign() != 0 {
			q.Add(q, big.NewInt(1))
		}
		q.Add(q, big.NewInt(p.Request*1000))
		if got := p.Cost(in, out); big.NewInt(int64(got)).Cmp(q) != 0 {
			t.Fatalf("%+v (%d, %d): %d, want %s", p, in, out, got, q)
		}
	}
}

func TestDumpBudgets(t *testing.T) {
	cfg, err := descriptors.Parse([]descriptors.File{{Name: "llm.yaml", Data: []byte(budgetYAML)}}, descriptors.Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := cfg.Dump()
	for _, want := range []string{
		`llm.tenant: budget=50.00usd/day@America/New_York debt=carry, shadow_mode: false, name: "daily_usd"`,
		"budget=2000.00usd/month@UTC debt=forgive",
		"budget=100000/month@Europe/Paris debt=carry charge=post",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("Dump() lacks %q:\n%s", want, got)
		}
	}
}
