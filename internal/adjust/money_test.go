package adjust_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dynalimit/dynalimit/internal/adjust"
	"github.com/dynalimit/dynalimit/internal/metrics"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/descriptors"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// gpt4o is $3 and $15 per million input and output tokens.
var gpt4o = descriptors.Price{Input: 3_000_000, Output: 15_000_000}

// budget is $50 a day, in micro-dollars.
var budget = must(tokenbucket.Rate(50_000_000, 24*time.Hour, 0))

// moneyPlan is admitted(est) with a daily budget in dollars on every
// level, estimated at price p for est input tokens, and the terms that
// settle tpm by a count and the budget by input and output at p.
func moneyPlan(est int64, p descriptors.Price) ([]cascade.Debit, []cascade.Status, []adjust.Term) {
	ds, ss := admitted(est)
	for depth, k := range chain {
		ds = append(ds, cascade.Debit{Key: k, Limit: "daily_usd", Bucket: budget, Amount: p.Estimate(uint64(est)), Op: cascade.Consume, Depth: uint8(depth)})
		ss = append(ss, cascade.Status{OK: true, Bucket: budget, Shard: depth})
	}
	terms := tpmOnly(ds)
	for i := range ds {
		if ds[i].Limit == "daily_usd" {
			terms[i] = adjust.Term{Adjustment: "daily_usd", Money: true, Price: p}
		}
	}
	return ds, ss, terms
}

func TestIssueCarriesThePrice(t *testing.T) {
	a := newAdjuster(t, newSettler(), nil, nil)
	ds, ss, terms := moneyPlan(500, gpt4o)
	token, _, err := a.Issue("llm", ds, ss, terms)
	if err != nil {
		t.Fatal(err)
	}
	l, err := a.Open(metrics.PathAccessLog, token)
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range l.Buckets {
		if len(b.Limits) != 2 {
			t.Fatalf("bucket %d = %+v, want tpm and daily_usd", i, b)
		}
		tpm, usd := b.Limits[0], b.Limits[1]
		if tpm.Money || tpm.Price != (descriptors.Price{}) {
			t.Errorf("bucket %d: tpm = %+v, want no price", i, tpm)
		}
		if !usd.Money || usd.Price != gpt4o || usd.Estimate != 1_500_000 || usd.Adjustment != "" {
			t.Errorf("bucket %d: daily_usd = %+v, want in money at %+v, estimated 1,500,000 nano-dollars", i, usd, gpt4o)
		}
	}
}

// TestSettleMoney: a limit in dollars settles from input and output tokens
// at the lease's price, a limit of tokens from a count; each kind of report
// settles its own kind only.
func TestSettleMoney(t *testing.T) {
	split := adjust.Report{In: 100_000, Out: 40_000, Split: true} // $0.90
	for _, tc := range []struct {
		name       string
		report     adjust.Report
		tpm, usd   tokenbucket.Millitokens // the signed amount settled on each level; 0 when none
		tpmSettled bool
		usdSettled bool
	}{
		{"split and count", adjust.Report{Tokens: 2000, Counted: true, In: 100_000, Out: 40_000, Split: true}, 1500 * tokenbucket.PerToken, 900_000_000 - 1_500_000, true, true},
		{"split only", split, 0, 900_000_000 - 1_500_000, false, true},
		{"count only", adjust.Report{Tokens: 100, Counted: true}, -400 * tokenbucket.PerToken, 0, true, false},
		{"cheaper than the estimate", adjust.Report{In: 10, Out: 10, Split: true}, 0, 180_000 - 1_500_000, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newSettler()
			a := newAdjuster(t, st, nil, nil)
			ds, ss, terms := moneyPlan(500, gpt4o)
			token, _, _ := a.Issue("llm", ds, ss, terms)
			l, _ := a.Open(metrics.PathStreamEnd, token)
			if res, err := a.Settle(context.Background(), metrics.PathStreamEnd, l, func(string) adjust.Report { return tc.report }); err != nil || res != metrics.AdjustApplied {
				t.Fatalf("Settle = %q, %v", res, err)
			}
			got, _ := st.get(l.ID)
			moved := map[string]tokenbucket.Millitokens{}
			n := map[string]int{}
			for _, d := range got.Debits {
				amount := d.Amount
				if d.Op == cascade.Refund {
					amount = -amount
				}
				moved[d.Limit] += amount
				n[d.Limit]++
			}
			if moved["tpm"] != 3*tc.tpm || moved["daily_usd"] != 3*tc.usd || (n["tpm"] == 3) != tc.tpmSettled || (n["daily_usd"] == 3) != tc.usdSettled {
				t.Errorf("settled %v on %v debits, want tpm %d and daily_usd %d on each of 3 levels", moved, n, tc.tpm, tc.usd)
			}
		})
	}
}

// TestSettleMoneyWithoutSplitReport: a lease of limits in dollars only,
// with a count and no input and output, settles nothing: the estimate
// stands, and the store is not called.
func TestSettleMoneyWithoutSplitReport(t *testing.T) {
	st := newSettler()
	a := newAdjuster(t, st, nil, nil)
	ds, ss, terms := moneyPlan(500, gpt4o)
	for i := range terms {
		if !terms[i].Money {
			terms[i] = adjust.Term{}
		}
	}
	token, _, _ := a.Issue("llm", ds, ss, terms)
	l, _ := a.Open(metrics.PathAccessLog, token)
	if _, err := a.Settle(context.Background(), metrics.PathAccessLog, l, tokens(2000)); !errors.Is(err, adjust.ErrNoCost) {
		t.Fatalf("Settle with a count only = %v, want ErrNoCost", err)
	}
	if st.calls != 0 {
		t.Errorf("the store was called %d times", st.calls)
	}
}

// TestMoneyMetrics: what a settlement moves is counted in tokens and in
// micro-dollars apart.
func TestMoneyMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	a := newAdjuster(t, newSettler(), metrics.New(reg), nil)
	ds, ss, terms := moneyPlan(500, gpt4o)
	token, _, _ := a.Issue("llm", ds, ss, terms)
	l, _ := a.Open(metrics.PathAccessLog, token)
	report := adjust.Report{Tokens: 2000, Counted: true, In: 100_000, Out: 40_000, Split: true}
	if _, err := a.Settle(context.Background(), metrics.PathAccessLog, l, func(string) adjust.Report { return report }); err != nil {
		t.Fatal(err)
	}
	if got := value(t, reg, "ratelimit_adjustment_tokens_total", "direction", "charged"); got != 4500 {
		t.Errorf("tokens charged = %v, want 4500 (1500 on each of 3 levels)", got)
	}
	if got := value(t, reg, "ratelimit_adjustment_microdollars_total", "direction", "charged"); got != 3*898_500 {
		t.Errorf("micro-dollars charged = %v, want %d ($0.8985 on each of 3 levels)", got, 3*898_500)
	}
}

// TestMoneyChargedIsThePricedReports is the property: over random prices,
// estimates and token counts, the nano-dollars charged through leases
// (each estimate, plus its settlement) are the sum of the priced reports,
// exactly; every lease delivered twice, through either path, settles once.
func TestMoneyChargedIsThePricedReports(t *testing.T) {
	rng := rand.New(rand.NewPCG(28, 1))
	st := newSettler()
	a := newAdjuster(t, st, nil, nil)
	for round := range 500 {
		p := descriptors.Price{Input: rng.Int64N(100_000_000), Output: rng.Int64N(100_000_000), Request: rng.Int64N(10_000)}
		if round%10 == 0 {
			p.Input = 0 // a free input
		}
		est := rng.Int64N(1_000_000)
		in, out := rng.Uint64N(2_000_000), rng.Uint64N(2_000_000)
		ds, ss, terms := moneyPlan(est, p)
		token, _, err := a.Issue("llm", ds, ss, terms)
		if err != nil {
			t.Fatal(err)
		}
		report := adjust.Report{In: in, Out: out, Split: true}
		paths := []string{metrics.PathStreamEnd, metrics.PathAccessLog}
		if round%2 == 1 {
			paths[0], paths[1] = paths[1], paths[0]
		}
		results := [2]string{}
		for i, path := range paths {
			l, err := a.Open(path, token)
			if err != nil {
				t.Fatal(err)
			}
			results[i], _ = a.Settle(context.Background(), path, l, func(string) adjust.Report { return report })
		}
		l, _ := a.Open(metrics.PathAccessLog, token)
		want := p.Cost(in, out)
		if results[0] != metrics.AdjustApplied && p.Estimate(uint64(est)) != want {
			t.Fatalf("round %d: first delivery %q", round, results[0])
		}
		if results[1] != metrics.AdjustDuplicate {
			t.Fatalf("round %d: second delivery %q, want duplicate", round, results[1])
		}
		got, _ := st.get(l.ID)
		for depth, k := range chain {
			charged := p.Estimate(uint64(est))
			for _, d := range got.Debits {
				if d.Key != k || d.Limit != "daily_usd" {
					continue
				}
				if d.Op == cascade.Refund {
					charged -= d.Amount
				} else {
					charged += d.Amount
				}
			}
			if charged != want {
				t.Fatalf("round %d level %d: price %+v, estimate %d tokens, report %d in %d out: charged %d nano-dollars, want %d",
					round, depth, p, est, in, out, charged, want)
			}
		}
	}
}
