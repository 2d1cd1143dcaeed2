package descriptors

import (
	"strings"
	"time"
)

// Unit is the time unit of a limit. Its numbers equal Envoy's
// envoy.service.ratelimit.v3.RateLimitResponse.RateLimit.Unit so that a
// service converts with a plain cast.
type Unit int32

// The units, numbered as in Envoy's RateLimitResponse_RateLimit_Unit.
const (
	UnitUnknown Unit = 0
	Second      Unit = 1
	Minute      Unit = 2
	Hour        Unit = 3
	Day         Unit = 4
	Month       Unit = 5
	Year        Unit = 6
	Week        Unit = 7
)

var unitNames = map[string]Unit{
	"SECOND": Second,
	"MINUTE": Minute,
	"HOUR":   Hour,
	"DAY":    Day,
	"MONTH":  Month,
	"YEAR":   Year,
	"WEEK":   Week,
}

// ParseUnit parses a unit name case-insensitively, as envoyproxy/ratelimit
// does (strings.ToUpper, then a lookup of Envoy's enum names). It reports
// false for UNKNOWN and for anything that is not a unit.
func ParseUnit(s string) (Unit, bool) {
	u, ok := unitNames[strings.ToUpper(s)]
	return u, ok
}

// String returns Envoy's enum name: "SECOND", "MINUTE", ... or "UNKNOWN".
func (u Unit) String() string {
	switch u {
	case Second:
		return "SECOND"
	case Minute:
		return "MINUTE"
	case Hour:
		return "HOUR"
	case Day:
		return "DAY"
	case Month:
		return "MONTH"
	case Year:
		return "YEAR"
	case Week:
		return "WEEK"
	}
	return "UNKNOWN"
}

// Duration returns the length of one unit: a week is 7 days, a month 30 days
// and a year 365 days. UnitUnknown and undefined units return 0.
func (u Unit) Duration() time.Duration {
	const day = 24 * time.Hour
	switch u {
	case Second:
		return time.Second
	case Minute:
		return time.Minute
	case Hour:
		return time.Hour
	case Day:
		return day
	case Week:
		return 7 * day
	case Month:
		return 30 * day
	case Year:
		return 365 * day
	}
	return 0
}

// Charge says when a limit is debited.
type Charge uint8

const (
	// ChargeUnset is a limit whose configuration names no charge mode (every
	// configuration written for envoyproxy/ratelimit, and every one pushed
	// over xDS): ordinary hits are consumed as ChargePre, and the service
	// decides how a descriptor's own hits_addend debits it (charged as
	// ChargePost by default: that is how Envoy reports a cost already spent
	// with apply_on_stream_done).
	ChargeUnset Charge = iota
	// ChargePre debits hits before the request is admitted: a request that
	// does not fit is refused and nothing is debited, whatever carries the
	// hits.
	ChargePre
	// ChargePost debits hits that report cost already spent (stream-done
	// calls): they are always debited, even past zero, and answered
	// OVER_LIMIT when they did not fit; a check on such a limit is admitted
	// while the bucket is not in debt.
	ChargePost
)

// String returns "pre" or "post", as written in the YAML, or "" when unset.
func (c Charge) String() string {
	switch c {
	case ChargePre:
		return "pre"
	case ChargePost:
		return "post"
	}
	return ""
}

// chargeMode reads a limit's charge field, reporting one that is not a mode.
func (b *builder) chargeMode(s string, line int) (Charge, bool) {
	c, valid := parseCharge(s)
	if !valid {
		b.errorf(line, "charge", "invalid charge '%s': want pre or post", s)
	}
	return c, valid
}

func parseCharge(s string) (Charge, bool) {
	switch s {
	case "pre":
		return ChargePre, true
	case "post":
		return ChargePost, true
	}
	return ChargeUnset, false
}
