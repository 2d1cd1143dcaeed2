package tokenbucket

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Period is the length of a calendar budget's period.
type Period uint8

// The periods of a calendar budget. A week starts on Monday (ISO 8601).
// Minutes and hours are fixed windows of absolute time, starting on the
// minute and the hour of UTC in every zone.
const (
	NoPeriod Period = iota
	Daily
	Weekly
	Monthly
	Minutely
	Hourly
)

// String returns "minute", "hour", "day", "week" or "month" ("" for
// NoPeriod).
func (p Period) String() string {
	switch p {
	case Minutely:
		return "minute"
	case Hourly:
		return "hour"
	case Daily:
		return "day"
	case Weekly:
		return "week"
	case Monthly:
		return "month"
	}
	return ""
}

// ParsePeriod parses "day", "week" or "month".
func ParsePeriod(s string) (Period, bool) {
	for _, p := range []Period{Minutely, Hourly, Daily, Weekly, Monthly} {
		if s == p.String() {
			return p, true
		}
	}
	return NoPeriod, false
}

// ErrCalendar is returned by NewCalendar for an unknown period or zone.
var ErrCalendar = errors.New("tokenbucket: a calendar needs a period of minute, hour, day, week or month and an IANA time zone")

// Calendar places a budget's periods on the calendar of one time zone:
// period i starts at local midnight of its first day (of the day, of the
// Monday of the week, of the 1st of the month), whatever daylight saving and
// month lengths make of it. The zero Calendar is none: a limit that refills
// continuously.
//
// Calendars are interned: two built from the same period and zone compare
// equal with ==, so a Limit holding one stays comparable.
type Calendar struct{ c *calendar }

type calendar struct {
	period Period
	zone   string
	name   string // period@zone
	loc    *time.Location
	cur    atomic.Pointer[span] // the period last asked for
}

// span is one period: its index and [start, end) in unix milliseconds.
type span struct{ idx, start, end int64 }

type calendarKey struct {
	period Period
	zone   string
}

var calendars sync.Map // calendarKey → *calendar

// NewCalendar returns the calendar of period p in the IANA time zone zone
// ("UTC" when empty).
func NewCalendar(p Period, zone string) (Calendar, error) {
	if zone == "" {
		zone = "UTC"
	}
	k := calendarKey{p, zone}
	if c, ok := calendars.Load(k); ok {
		return Calendar{c.(*calendar)}, nil
	}
	if p < Daily || p > Hourly {
		return Calendar{}, ErrCalendar
	}
	loc, err := time.LoadLocation(zone)
	if err != nil || zone == "Local" {
		return Calendar{}, fmt.Errorf("%w: unknown zone %q", ErrCalendar, zone)
	}
	c, _ := calendars.LoadOrStore(k, &calendar{period: p, zone: zone, loc: loc, name: p.String() + "@" + zone})
	return Calendar{c.(*calendar)}, nil
}

// ParseCalendar parses Calendar.String's form, "month@America/New_York".
func ParseCalendar(s string) (Calendar, error) {
	per, zone, ok := strings.Cut(s, "@")
	p, valid := ParsePeriod(per)
	if !ok || !valid {
		return Calendar{}, fmt.Errorf("%w: %q", ErrCalendar, s)
	}
	return NewCalendar(p, zone)
}

// IsZero reports whether c is no calendar.
func (c Calendar) IsZero() bool { return c.c == nil }

// Period returns the calendar's period (NoPeriod for the zero Calendar).
func (c Calendar) Period() Period {
	if c.c == nil {
		return NoPeriod
	}
	return c.c.period
}

// Zone returns the calendar's IANA time zone ("" for the zero Calendar).
func (c Calendar) Zone() string {
	if c.c == nil {
		return ""
	}
	return c.c.zone
}

// String returns "month@America/New_York", or "" for the zero Calendar.
func (c Calendar) String() string {
	if c.c == nil {
		return ""
	}
	return c.c.name
}

// Index returns the index of the period holding unix millisecond ms: the
// number of periods from the one holding 1970-01-01 in the zone's calendar
// (negative before). It never decreases as ms grows, even across a change of
// the zone's offset that repeats a local midnight.
func (c Calendar) Index(ms int64) int64 {
	if s := c.c.cur.Load(); s != nil && s.start <= ms && ms < s.end {
		return s.idx
	}
	s := c.c.spanOf(ms)
	c.c.cur.Store(&s)
	return s.idx
}

// Start returns the unix millisecond at which period idx starts.
func (c Calendar) Start(idx int64) int64 { return c.c.start(idx) }

// spanOf finds the period holding ms: the last whose start is not after it.
func (c *calendar) spanOf(ms int64) span {
	if w := c.window(); w > 0 {
		idx := floorDiv(ms, w)
		return span{idx: idx, start: idx * w, end: (idx + 1) * w}
	}
	y, m, d := time.UnixMilli(ms).In(c.loc).Date()
	idx := c.index(y, m, d)
	for c.start(idx) > ms {
		idx--
	}
	for c.start(idx+1) <= ms {
		idx++
	}
	return span{idx: idx, start: c.start(idx), end: c.start(idx + 1)}
}

// window is the length in milliseconds of a fixed-window period, or 0.
func (c *calendar) window() int64 {
	switch c.period {
	case Minutely:
		return 60_000
	case Hourly:
		return 3_600_000
	}
	return 0
}

// index is the index of the period holding the local date y-m-d.
func (c *calendar) index(y int, m time.Month, d int) int64 {
	days := civilDays(y, m, d)
	switch c.period {
	case Weekly:
		return floorDiv(days+3, 7) // 1970-01-01 was a Thursday
	case Monthly:
		return int64(y)*12 + int64(m) - 1 - 1970*12
	}
	return days
}

// start is the first instant of period idx: the first instant whose local
// date is the period's first day or later.
func (c *calendar) start(idx int64) int64 {
	if w := c.window(); w > 0 {
		return idx * w
	}
	var y int
	var m time.Month
	var d int
	switch c.period {
	case Monthly:
		months := idx + 1970*12
		y, m, d = int(floorDiv(months, 12)), time.Month(months-floorDiv(months, 12)*12+1), 1
	case Weekly:
		y, m, d = civilDate(idx*7 - 3)
	default:
		y, m, d = civilDate(idx)
	}
	t := time.Date(y, m, d, 0, 0, 0, 0, c.loc).UnixMilli()
	if c.before(t, y, m, d) {
		// Local midnight does not exist that day (the clock skipped it) and
		// time.Date chose an instant of the day before: the day starts at
		// the first instant that reads as it, found by bisection.
		lo, hi := t, t+int64(24*time.Hour/time.Millisecond)
		for hi-lo > 1 {
			mid := lo + (hi-lo)/2
			if c.before(mid, y, m, d) {
				lo = mid
			} else {
				hi = mid
			}
		}
		t = hi
	}
	return t
}

// before reports whether unix millisecond ms reads, in the zone, as a date
// before y-m-d.
func (c *calendar) before(ms int64, y int, m time.Month, d int) bool {
	ly, lm, ld := time.UnixMilli(ms).In(c.loc).Date()
	return civilDays(ly, lm, ld) < civilDays(y, m, d)
}

// civilDays returns the days from 1970-01-01 to y-m-d in the proleptic
// Gregorian calendar (Howard Hinnant's days_from_civil).
func civilDays(y int, m time.Month, d int) int64 {
	yy := int64(y)
	if m <= 2 {
		yy--
	}
	era := floorDiv(yy, 400)
	yoe := yy - era*400
	mp := (int64(m) + 9) % 12
	doy := (153*mp+2)/5 + int64(d) - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return era*146097 + doe - 719468
}

// civilDate is civilDays' inverse.
func civilDate(days int64) (int, time.Month, int) {
	z := days + 719468
	era := floorDiv(z, 146097)
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	d := doy - (153*mp+2)/5 + 1
	m := mp + 3
	if m > 12 {
		m -= 12
	}
	y := yoe + era*400
	if m <= 2 {
		y++
	}
	return int(y), time.Month(m), int(d)
}
