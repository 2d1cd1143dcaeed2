package descriptors

import (
	"fmt"

	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// The schema of calendar budgets (a descriptor's budget: block, or a
// limits entry's) and of a domain's prices: block.

// budgetKeys are the keys of a budget block.
func budgetKeys() []string {
	return []string{"name", "total", "usd", "per", "zone", "debt", "charge"}
}

// budgetFields holds a budget block's fields as read.
type budgetFields struct {
	line               int
	lines              map[string]int
	name, per, zone    string
	debt, charge, usd  string
	total              uint64
	hasTotal, hasUSD   bool
	hasCharge, hasDebt bool
	bad                bool
}

// readBudget reads a budget block; name is the limits entry's name, ""
// under a descriptor.
func (b *builder) readBudget(p pair, name string) (budgetFields, bool) {
	f := budgetFields{line: p.k.Line, lines: map[string]int{}, name: name}
	m := b.mapping(p)
	if m == nil {
		b.errorf(p.k.Line, "budget", "budget must not be empty: it needs total or usd, and per")
		return f, false
	}
	for _, q := range b.pairs(m) {
		f.lines[q.name] = q.k.Line
		ok := true
		switch q.name {
		case "name":
			if name != "" {
				b.errorf(q.k.Line, "name", "a limits entry names its budget with its own name")
				ok = false
			}
			f.name, _ = b.str(q)
		case "total":
			f.total, ok = b.number(q, MaxRequestsPerUnit)
			f.hasTotal = true
		case "usd":
			f.usd, ok = b.str(q)
			f.hasUSD = true
		case "per":
			f.per, ok = b.str(q)
		case "zone":
			f.zone, ok = b.str(q)
		case "debt":
			f.debt, ok = b.str(q)
			f.hasDebt = true
		case "charge":
			f.charge, ok = b.str(q)
			f.hasCharge = true
		default:
			b.errorf(q.k.Line, q.name, "config error, unknown key '%s' in budget%s", q.name, didYouMean(q.name, "in budget"))
			ok = false
		}
		f.bad = f.bad || !ok
	}
	return f, !f.bad
}

// buildBudget validates a budget's fields and computes its bucket.
func (b *builder) buildBudget(f budgetFields) (Limit, bool) {
	l := Limit{Name: f.name, ID: f.name, UnitMultiplier: 1}
	if l.ID == "" {
		l.ID = "default"
	}
	ok := true
	switch {
	case f.hasTotal == f.hasUSD:
		b.errorf(f.line, "budget", "a budget has either total (requests or tokens) or usd (dollars), not both and not neither")
		ok = false
	case f.hasUSD:
		micros, valid := ParseUSD(f.usd)
		if !valid || micros == 0 {
			b.errorf(f.lines["usd"], "usd", "invalid usd '%s': want a positive amount of dollars with at most 6 decimals, at most %d", f.usd, MaxMicros/MicrosPerUSD)
			ok = false
		}
		l.RequestsPerUnit, l.Money = uint64(micros), true
	case f.total == 0:
		b.errorf(f.lines["total"], "total", "a budget's total must be at least 1")
		ok = false
	default:
		l.RequestsPerUnit = f.total
	}
	period, valid := tokenbucket.ParsePeriod(f.per)
	if !valid {
		line := f.lines["per"]
		if line == 0 {
			line = f.line
		}
		b.errorf(line, "per", "invalid per '%s': want one of minute, hour, day, week, month", f.per)
		ok = false
	}
	cal, err := tokenbucket.NewCalendar(period, f.zone)
	if valid && err != nil {
		b.errorf(f.lines["zone"], "zone", "invalid zone '%s': want an IANA time zone such as UTC or America/New_York", f.zone)
		ok = false
	}
	carry := true
	switch f.debt {
	case "carry":
	case "forgive":
		carry = false
	default:
		if f.hasDebt {
			b.errorf(f.lines["debt"], "debt", "invalid debt '%s': want carry or forgive", f.debt)
			ok = false
		}
	}
	if f.hasCharge {
		var valid bool
		l.Charge, valid = b.chargeMode(f.charge, f.lines["charge"])
		ok = ok && valid
	}
	if !ok {
		return l, false
	}
	l.Unit = periodUnit[period]
	bucket, err := tokenbucket.Budget(tokenbucket.Millitokens(l.RequestsPerUnit)*tokenbucket.PerToken, cal, carry)
	if err != nil {
		b.errorf(f.line, "budget", "%v", err)
		return l, false
	}
	l.Bucket = bucket
	return l, true
}

// PeriodUnit returns the Envoy unit a budget of period p reports as.
func PeriodUnit(p tokenbucket.Period) Unit { return periodUnit[p] }

// periodUnit is the Envoy unit a budget's period reports as.
var periodUnit = map[tokenbucket.Period]Unit{
	tokenbucket.Minutely: Minute, tokenbucket.Hourly: Hour, tokenbucket.Daily: Day,
	tokenbucket.Weekly: Week, tokenbucket.Monthly: Month,
}

// budgetRule builds the rule of a descriptor's budget: block.
func (b *builder) budgetRule(p pair) *Rule {
	f, ok := b.readBudget(p, "")
	if !ok {
		return nil
	}
	l, ok := b.buildBudget(f)
	if !ok {
		return nil
	}
	return &Rule{Name: f.name, Limits: []Limit{l}}
}

// priceKeys are the keys of a prices block, and of one price.
func priceKeys() []string {
	return []string{"resource_key", "input_key", "output_key", "models", "default"}
}
func onePriceKeys() []string { return []string{"input", "output", "request"} }

// priceList reads a domain's prices: block.
func (b *builder) priceList(p pair) {
	m := b.mapping(p)
	if m == nil {
		b.errorf(p.k.Line, "prices", "prices must not be empty")
		return
	}
	t := &PriceTable{ResourceKey: "model", InputKey: "llm_input_token", OutputKey: "llm_output_token",
		Prices: map[string]Price{}, File: b.fileName, Line: p.k.Line}
	ok := true
	for _, q := range b.pairs(m) {
		switch q.name {
		case "resource_key", "input_key", "output_key":
			s, good := b.str(q)
			if good && s == "" {
				b.errorf(q.k.Line, q.name, "%s must not be empty", q.name)
				good = false
			}
			switch q.name {
			case "resource_key":
				t.ResourceKey = s
			case "input_key":
				t.InputKey = s
			default:
				t.OutputKey = s
			}
			ok = ok && good
		case "models":
			mm := b.mapping(q)
			if mm == nil {
				continue
			}
			for _, r := range b.pairs(mm) {
				pr, good := b.price(r)
				t.Prices[r.name] = pr
				ok = ok && good
			}
		case "default":
			t.Default, t.HasDefault = b.price(q)
			ok = ok && t.HasDefault
		default:
			b.errorf(q.k.Line, q.name, "config error, unknown key '%s' in prices%s", q.name, didYouMean(q.name, "in prices"))
			ok = false
		}
	}
	if t.InputKey == t.OutputKey || t.InputKey == t.ResourceKey || t.OutputKey == t.ResourceKey {
		b.errorf(p.k.Line, "prices", "resource_key, input_key and output_key must differ")
		ok = false
	}
	if !ok || b.domain == "" {
		return
	}
	if b.prices == nil {
		b.prices = map[string]*PriceTable{}
	}
	if old := b.prices[b.domain]; old != nil {
		b.errorf(p.k.Line, "prices", "domain '%s' already has prices (%s:%d): a domain has one price table", b.domain, old.File, old.Line)
		return
	}
	b.prices[b.domain] = t
}

// price reads one price: dollars per million input and output tokens, and
// per request.
func (b *builder) price(p pair) (Price, bool) {
	m := b.mapping(p)
	if m == nil || len(m.Content) == 0 {
		b.errorf(p.k.Line, p.name, "a price needs input, output or request")
		return Price{}, false
	}
	var pr Price
	ok := true
	for _, q := range b.pairs(m) {
		var dst *int64
		switch q.name {
		case "input":
			dst = &pr.Input
		case "output":
			dst = &pr.Output
		case "request":
			dst = &pr.Request
		default:
			b.errorf(q.k.Line, q.name, "config error, unknown key '%s' in a price%s", q.name, didYouMean(q.name, "in a price"))
			ok = false
			continue
		}
		s, _ := b.str(q)
		v, valid := ParseUSD(s)
		if !valid {
			b.errorf(q.k.Line, q.name, "invalid %s price '%s': want dollars with at most 6 decimals (per million tokens, or per request)", q.name, s)
			ok = false
		}
		*dst = v
	}
	return pr, ok
}

// checkMoney reports the money limits of domains without prices.
func (b *builder) checkMoney() {
	for _, r := range b.rules {
		for _, l := range r.Limits {
			if l.Money && b.prices[r.Domain] == nil {
				b.problems = append(b.problems, Problem{File: r.File, Line: r.Line, Key: "usd",
					Msg: fmt.Sprintf("limit '%s' is in dollars but domain '%s' has no prices: block", l.ID, r.Domain)})
			}
		}
	}
}
