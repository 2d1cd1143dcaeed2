package service

import (
	"strconv"

	"github.com/dynalimit/dynalimit/pkg/descriptors"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// Money: a domain with a price table turns what a request reports into
// micro-dollars for its money limits (descriptors.PriceTable).

// takeCounts removes from a descriptor's entries the token counts it
// reports (the table's input and output keys), which are not part of its
// identity, and records them. A count that is not a whole number is
// invalid.
func takeCounts(pt *descriptors.PriceTable, a *asked, i int) error {
	kept := a.entries[:0]
	seen := 0
	for _, e := range a.entries {
		var dst *uint64
		switch e.Key {
		case pt.InputKey:
			dst, seen = &a.in, seen|1
		case pt.OutputKey:
			dst, seen = &a.out, seen|2
		default:
			kept = append(kept, e)
			continue
		}
		v, err := strconv.ParseUint(e.Value, 10, 64)
		if err != nil || v > MaxHits {
			return invalid(reasonCount, "service: descriptor "+strconv.Itoa(i)+" reports "+e.Key+" "+strconv.Quote(e.Value)+
				": want a whole number of tokens up to "+strconv.FormatUint(MaxHits, 10))
		}
		*dst, a.reported = v, true
	}
	a.entries = kept
	a.both = a.both || seen == 3
	return nil
}

// price sets what a descriptor costs its money limits: the reported tokens
// at the price of its resource, or before the response its estimate (its
// hits priced as input tokens, plus the price per request).
func price(pt *descriptors.PriceTable, a *asked, i int) error {
	if pt == nil {
		return invalid(reasonPrice, "service: descriptor "+strconv.Itoa(i)+": its limits are in dollars and its domain has no prices")
	}
	resource := ""
	for _, e := range a.entries {
		if e.Key == pt.ResourceKey {
			resource = e.Value
			break
		}
	}
	p, ok := pt.PriceOf(resource)
	if !ok {
		return invalid(reasonPrice, "service: descriptor "+strconv.Itoa(i)+": the domain's prices have no price for "+
			pt.ResourceKey+" "+strconv.Quote(resource)+" and no default")
	}
	a.price = p
	if a.reported {
		a.money = p.Cost(a.in, a.out)
	} else {
		a.money = p.Estimate(a.hits)
	}
	return nil
}

// amount is what a debit of limit l takes for a descriptor: its priced cost
// for a money limit, else its hits in millitokens.
func (a *asked) amount(l *descriptors.Limit) tokenbucket.Millitokens {
	if l.Money {
		return a.money
	}
	return tokenbucket.Millitokens(a.hits) * tokenbucket.PerToken
}
