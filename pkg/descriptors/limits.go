package descriptors

import (
	"math"
	"regexp"

	"gopkg.in/yaml.v3"

	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// The schema of limits: a descriptor's rate_limit block (envoyproxy's) and
// its limits: list (several named limits on one node).

// MaxRequestsPerUnit bounds requests_per_unit and burst.
const MaxRequestsPerUnit = 1_000_000_000_000

var limitNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// limitFields holds one limit's fields as read.
type limitFields struct {
	line                   int
	lines                  map[string]int
	name, unit, charge     string
	rpu, burst             uint64
	mult                   uint64
	hasMult, hasBurst, bad bool
	hasCharge              bool
}

// limitField reads a field shared by rate_limit and limits entries; it
// reports false for other keys.
func (b *builder) limitField(f *limitFields, p pair) bool {
	var ok bool
	if f.lines == nil {
		f.lines = map[string]int{}
	}
	f.lines[p.name] = p.k.Line
	switch p.name {
	case "name":
		f.name, ok = b.str(p)
	case "unit":
		f.unit, ok = b.str(p)
	case "requests_per_unit":
		f.rpu, ok = b.number(p, MaxRequestsPerUnit)
	case "unit_multiplier":
		f.mult, ok = b.number(p, math.MaxUint32)
		f.hasMult = true
	case "burst":
		f.burst, ok = b.number(p, MaxRequestsPerUnit)
		f.hasBurst = true
	case "charge":
		f.charge, ok = b.str(p)
		f.hasCharge = true
	default:
		return false
	}
	f.bad = f.bad || !ok
	return true
}

// buildLimit validates a limit's numbers and computes its bucket.
func (b *builder) buildLimit(f *limitFields, u Unit) (Limit, bool) {
	l := Limit{Name: f.name, ID: f.name, Unit: u, RequestsPerUnit: f.rpu, UnitMultiplier: 1, Burst: f.burst}
	if l.ID == "" {
		l.ID = "default"
	}
	ok := !f.bad
	if u.Duration() <= 0 {
		b.errorf(f.line, "unit", "invalid rate limit unit '%s': %s", f.unit, unitList)
		return l, false
	}
	if f.hasMult {
		if f.mult < 1 {
			b.errorf(f.lines["unit_multiplier"], "unit_multiplier", "unit_multiplier must be at least 1")
			ok = false
		} else if f.mult > uint64(math.MaxInt64/u.Duration()) {
			b.errorf(f.lines["unit_multiplier"], "unit_multiplier", "unit_multiplier %d makes the period too long (at most %d %s units)", f.mult, math.MaxInt64/u.Duration(), u)
			ok = false
		} else {
			l.UnitMultiplier = uint32(f.mult)
		}
	}
	if f.hasBurst {
		switch {
		case f.rpu == 0 && f.burst > 0:
			b.errorf(f.lines["burst"], "burst", "burst needs requests_per_unit of at least 1")
			ok = false
		case f.burst < f.rpu:
			b.errorf(f.lines["burst"], "burst", "burst (%d) must be at least requests_per_unit (%d)", f.burst, f.rpu)
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
	if l.RequestsPerUnit == 0 {
		l.Deny = true
		return l, true
	}
	bucket, err := tokenbucket.Rate(l.RequestsPerUnit, l.Period(), l.Burst)
	if err != nil {
		b.errorf(f.line, "requests_per_unit", "%v", err)
		return l, false
	}
	l.Bucket = bucket
	return l, true
}

func (b *builder) rateLimit(p pair, m *yaml.Node) *Rule {
	f := limitFields{line: p.k.Line}
	var unlimited bool
	var replaces []string
	var replaceLines []int
	unitLine := p.k.Line
	for _, q := range b.pairs(m) {
		if q.name == "unit" {
			unitLine = q.k.Line
		}
		if b.limitField(&f, q) {
			continue
		}
		switch q.name {
		case "unlimited":
			unlimited = b.boolean(q)
		case "replaces":
			for _, r := range b.list(q) {
				name := ""
				for _, rp := range b.pairs(r) {
					if rp.name == "name" {
						name, _ = b.str(rp)
					} else {
						b.unknown(rp, "in a replaces entry")
					}
				}
				replaces = append(replaces, name)
				replaceLines = append(replaceLines, r.Line)
			}
		default:
			b.unknown(q, "in rate_limit")
		}
	}
	bad := false
	for i, name := range replaces {
		switch {
		case name == "":
			b.errorf(replaceLines[i], "replaces", "should not have an empty replaces entry")
			bad = true
		case name == f.name:
			b.errorf(replaceLines[i], "replaces", "replaces should not contain name of same descriptor")
			bad = true
		}
	}
	u, validUnit := ParseUnit(f.unit)
	r := &Rule{Name: f.name, Replaces: replaces}
	if unlimited {
		if validUnit {
			b.errorf(unitLine, "unit", "should not specify rate limit unit when unlimited")
			return nil
		}
		if f.hasBurst || f.hasCharge {
			b.errorf(p.k.Line, "rate_limit", "burst and charge have no meaning when unlimited")
			return nil
		}
		if bad || f.bad {
			return nil
		}
		r.Unlimited = true
		return r
	}
	if !validUnit {
		b.errorf(unitLine, "unit", "invalid rate limit unit '%s': %s", f.unit, unitList)
		return nil
	}
	l, ok := b.buildLimit(&f, u)
	if !ok || bad {
		return nil
	}
	r.Limits = []Limit{l}
	return r
}

// entryBudget builds the budget of a limits entry, which holds its name
// and nothing else beside it.
func (b *builder) entryBudget(p pair, f *limitFields) (Limit, bool) {
	for k, line := range f.lines {
		if k != "name" {
			b.errorf(line, k, "a limits entry with a budget holds only its name beside it; %s goes inside the budget or not at all", k)
			return Limit{}, false
		}
	}
	bf, ok := b.readBudget(p, f.name)
	if !ok {
		return Limit{}, false
	}
	return b.buildBudget(bf)
}

func (b *builder) limitList(p pair) *Rule {
	items := b.list(p)
	if len(p.v.Content) == 0 && (p.v.Kind == yaml.SequenceNode || p.v.Tag == "!!null") {
		b.errorf(p.k.Line, "limits", "limits must not be empty")
		return nil
	}
	r := &Rule{}
	seen := map[string]bool{}
	ok := true
	for _, item := range items {
		f := limitFields{line: item.Line}
		unitLine := item.Line
		var budget *pair
		for _, q := range b.pairs(item) {
			if q.name == "unit" {
				unitLine = q.k.Line
			}
			if q.name == "budget" {
				budget = &q
				continue
			}
			if !b.limitField(&f, q) {
				b.errorf(q.k.Line, q.name, "config error, unknown key '%s' in limits entry%s", q.name, didYouMean(q.name, "in limits entry"))
				ok = false
			}
		}
		switch {
		case f.name == "":
			b.errorf(item.Line, "name", "limits entry needs a name")
			ok = false
			continue
		case !limitNameRE.MatchString(f.name):
			b.errorf(item.Line, "name", "invalid limit name %q: want 1 to 64 of [A-Za-z0-9_-]", f.name)
			ok = false
			continue
		case seen[f.name]:
			b.errorf(item.Line, "name", "duplicate limit name '%s'", f.name)
			ok = false
			continue
		}
		seen[f.name] = true
		if budget != nil {
			l, good := b.entryBudget(*budget, &f)
			if good {
				r.Limits = append(r.Limits, l)
			}
			ok = ok && good
			continue
		}
		u, validUnit := ParseUnit(f.unit)
		if !validUnit {
			b.errorf(unitLine, "unit", "invalid rate limit unit '%s': %s", f.unit, unitList)
			ok = false
			continue
		}
		l, good := b.buildLimit(&f, u)
		if !good {
			ok = false
			continue
		}
		r.Limits = append(r.Limits, l)
	}
	if !ok {
		return nil
	}
	return r
}
