package admin

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// ParseLimit parses "name:rate[/sec|/min|/hour|/day][:burst]" (rate per
// second when the unit is omitted): e.g. "rpm:100/min", "tpm:50000/min:80000".
func ParseLimit(spec string) (string, tokenbucket.Limit, error) {
	parts := strings.Split(spec, ":")
	if len(parts) < 2 || len(parts) > 3 || parts[0] == "" {
		return "", tokenbucket.Limit{}, fmt.Errorf("dynamo: limit %q: want name:rate[/sec|/min|/hour|/day][:burst]", spec)
	}
	rate, unit, _ := strings.Cut(parts[1], "/")
	period := time.Second
	switch unit {
	case "", "s", "sec", "second":
	case "m", "min", "minute":
		period = time.Minute
	case "h", "hour":
		period = time.Hour
	case "d", "day":
		period = 24 * time.Hour
	default:
		return "", tokenbucket.Limit{}, fmt.Errorf("dynamo: limit %q: unknown unit %q (sec, min, hour, day)", spec, unit)
	}
	n, err := strconv.ParseUint(rate, 10, 64)
	if err != nil {
		return "", tokenbucket.Limit{}, fmt.Errorf("dynamo: limit %q: rate: %w", spec, err)
	}
	var burst uint64
	if len(parts) == 3 {
		if burst, err = strconv.ParseUint(parts[2], 10, 64); err != nil {
			return "", tokenbucket.Limit{}, fmt.Errorf("dynamo: limit %q: burst: %w", spec, err)
		}
	}
	l, err := tokenbucket.Rate(n, period, burst)
	if err != nil {
		return "", tokenbucket.Limit{}, fmt.Errorf("dynamo: limit %q: %w", spec, err)
	}
	return parts[0], l, nil
}

// FormatLimit renders a limit in ParseLimit's syntax when it has one (whole
// tokens, period of a second, minute, hour or day), else as
// name:capacity=…,refill=…/period in millitokens.
func FormatLimit(name string, l tokenbucket.Limit) string {
	units := map[time.Duration]string{time.Second: "sec", time.Minute: "min", time.Hour: "hour", 24 * time.Hour: "day"}
	u, ok := units[l.RefillPeriod]
	if ok && l.RefillAmount%tokenbucket.PerToken == 0 && l.Capacity%tokenbucket.PerToken == 0 {
		s := fmt.Sprintf("%s:%d/%s", name, l.RefillAmount/tokenbucket.PerToken, u)
		if l.Capacity != l.RefillAmount {
			s += fmt.Sprintf(":%d", l.Capacity/tokenbucket.PerToken)
		}
		return s
	}
	return fmt.Sprintf("%s:capacity=%dmt,refill=%dmt/%v", name, l.Capacity, l.RefillAmount, l.RefillPeriod)
}

// FormatLimits renders limits sorted by name, space separated.
func FormatLimits(m map[string]tokenbucket.Limit) string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = FormatLimit(n, m[n])
	}
	return strings.Join(out, " ")
}
