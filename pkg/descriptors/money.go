package descriptors

import (
	"math/bits"
	"strconv"
	"strings"

	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// Money is counted in micro-dollars, as integers: a money limit's token is
// one micro-dollar, so its millitoken is a nano-dollar. Nothing is a float.

// MicrosPerUSD is the number of micro-dollars in a dollar.
const MicrosPerUSD = 1_000_000

// MaxMicros bounds a money amount in the configuration: a billion dollars.
const MaxMicros = 1_000_000_000 * MicrosPerUSD

// ParseUSD parses a decimal amount of dollars ("50", "0.15", "2000.000001")
// into micro-dollars exactly: digits, an optional point and at most six
// decimals, no sign or exponent, at most MaxMicros.
func ParseUSD(s string) (int64, bool) {
	whole, frac, _ := strings.Cut(s, ".")
	if whole == "" || len(frac) > 6 || !digits(whole) || !digits(frac) || len(whole) > 10 {
		return 0, false
	}
	w, err := strconv.ParseInt(whole, 10, 64)
	if err != nil {
		return 0, false
	}
	f := int64(0)
	if frac != "" {
		f, _ = strconv.ParseInt(frac+strings.Repeat("0", 6-len(frac)), 10, 64)
	}
	v := w*MicrosPerUSD + f
	return v, v <= MaxMicros
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// FormatUSD writes micro-dollars as a decimal amount of dollars with the
// decimals it needs, at least two: 50 dollars is "50.00", 15 cents "0.15",
// a micro-dollar "0.000001"; a debt is negative ("-0.80").
func FormatUSD(micros int64) string {
	sign := ""
	u := uint64(micros)
	if micros < 0 {
		sign, u = "-", uint64(-(micros+1))+1
	}
	frac := strconv.FormatUint(u%MicrosPerUSD+MicrosPerUSD, 10)[1:]
	frac = strings.TrimRight(frac, "0")
	for len(frac) < 2 {
		frac += "0"
	}
	return sign + strconv.FormatUint(u/MicrosPerUSD, 10) + "." + frac
}

// Price is what one resource (a model) costs, in micro-dollars: per million
// input tokens, per million output tokens and per request.
type Price struct {
	Input, Output, Request int64
}

// Cost returns what a request of in input and out output tokens costs at p,
// in millitokens of a money limit (nano-dollars): the token prices exactly,
// rounded up to the nano-dollar once for the whole request, plus the
// request's price. It saturates at tokenbucket.MaxMillitokens.
func (p Price) Cost(in, out uint64) tokenbucket.Millitokens {
	// n·price/10^6 micro-dollars is n·price/10^3 nano-dollars.
	hi1, lo1 := bits.Mul64(in, uint64(p.Input))
	hi2, lo2 := bits.Mul64(out, uint64(p.Output))
	lo, carry := bits.Add64(lo1, lo2, 0)
	hi, over := bits.Add64(hi1, hi2, carry)
	const max = uint64(tokenbucket.MaxMillitokens)
	if over != 0 || hi >= 1000 {
		return tokenbucket.MaxMillitokens // the quotient would not fit in 64 bits
	}
	q, r := bits.Div64(hi, lo, 1000)
	if r != 0 {
		q++
	}
	req := uint64(p.Request) * uint64(tokenbucket.PerToken)
	if q > max || req > max-q {
		return tokenbucket.MaxMillitokens
	}
	return tokenbucket.Millitokens(q + req)
}

// Estimate is the cost charged before the response for a request that asks
// hits tokens of a money limit: its price per request and hits priced as
// input tokens. A check (hits 0) costs nothing.
func (p Price) Estimate(hits uint64) tokenbucket.Millitokens {
	if hits == 0 {
		return 0
	}
	return p.Cost(hits, 0)
}

// PriceTable is a domain's prices: the resource a request uses is named by
// the value of its descriptor entry ResourceKey, and the gateway reports the
// tokens a request used in the entries InputKey and OutputKey (Envoy AI
// Gateway's llm_input_token and llm_output_token by default), which are not
// part of the descriptor's identity.
type PriceTable struct {
	ResourceKey, InputKey, OutputKey string
	// Prices holds each resource's price; Default, when HasDefault, prices
	// the others.
	Prices     map[string]Price
	Default    Price
	HasDefault bool
	// File and Line say where the table is written.
	File string
	Line int
}

// PriceOf returns the price of resource, and false when the table has
// neither it nor a default.
func (t *PriceTable) PriceOf(resource string) (Price, bool) {
	if p, ok := t.Prices[resource]; ok {
		return p, true
	}
	return t.Default, t.HasDefault
}

// Prices returns the domain's price table, nil when it has none.
func (c *Config) Prices(domain string) *PriceTable {
	if c == nil {
		return nil
	}
	return c.prices[domain]
}

// PricedDomains returns the domains that have a price table, sorted.
func (c *Config) PricedDomains() []string {
	if c == nil {
		return nil
	}
	return sortedKeys(c.prices)
}

// Amount writes an amount of l's whole tokens in l's own unit: dollars for
// a money limit (its tokens are micro-dollars), else the plain count.
func (l Limit) Amount(tokens int64) string {
	if l.Money {
		return FormatUSD(tokens)
	}
	return strconv.FormatInt(tokens, 10)
}
