package tokenbucket_test

import (
	"math/rand/v2"
	"testing"
	"time"

	tb "github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

func mustCalendar(t *testing.T, p tb.Period, zone string) tb.Calendar {
	t.Helper()
	c, err := tb.NewCalendar(p, zone)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func at(t *testing.T, zone, s string) int64 {
	t.Helper()
	loc, err := time.LoadLocation(zone)
	if err != nil {
		t.Fatal(err)
	}
	v, err := time.ParseInLocation("2006-01-02 15:04:05.000", s, loc)
	if err != nil {
		t.Fatal(err)
	}
	return v.UnixMilli()
}

// The monthly boundaries of New York across a 31-day month, a 28-day
// February and both daylight-saving changes fall exactly at local midnight
// on the 1st.
func TestCalendarMonthBoundaries(t *testing.T) {
	const ny = "America/New_York"
	c := mustCalendar(t, tb.Monthly, ny)
	for _, day := range []string{"2027-01-01", "2027-02-01", "2027-03-01", "2027-04-01", "2026-11-01", "2026-12-01"} {
		first := at(t, ny, day+" 00:00:00.000")
		last := c.Index(first - 1) // cached: the next call is the cache's end
		if got := c.Index(first) - last; got != 1 {
			t.Errorf("%s: the period does not change at local midnight (%d)", day, got)
		}
		if c.Start(c.Index(first)) != first {
			t.Errorf("%s: period starts at %d, want %d", day, c.Start(c.Index(first)), first)
		}
	}
	// January holds 31 days, February 2027 28, March 31 with a 23-hour day.
	for _, m := range []struct {
		from, to string
		hours    int64
	}{
		{"2027-01-01", "2027-02-01", 31 * 24},
		{"2027-02-01", "2027-03-01", 28 * 24},
		{"2027-03-01", "2027-04-01", 31*24 - 1},
		{"2026-11-01", "2026-12-01", 30*24 + 1},
	} {
		from := at(t, ny, m.from+" 00:00:00.000")
		i := c.Index(from)
		if got := (c.Start(i+1) - c.Start(i)) / 3_600_000; got != m.hours {
			t.Errorf("%s: %d hours, want %d", m.from, got, m.hours)
		}
	}
}

func TestCalendarDaysAndWeeks(t *testing.T) {
	const ny = "America/New_York"
	d := mustCalendar(t, tb.Daily, ny)
	spring := d.Index(at(t, ny, "2027-03-14 12:00:00.000"))
	if got := d.Start(spring+1) - d.Start(spring); got != 23*3_600_000 {
		t.Errorf("the spring-forward day lasts %d ms", got)
	}
	fall := d.Index(at(t, ny, "2026-11-01 12:00:00.000"))
	if got := d.Start(fall+1) - d.Start(fall); got != 25*3_600_000 {
		t.Errorf("the fall-back day lasts %d ms", got)
	}
	w := mustCalendar(t, tb.Weekly, "UTC")
	monday := at(t, "UTC", "2026-11-23 00:00:00.000") // a Monday
	if w.Index(monday)-w.Index(monday-1) != 1 || w.Start(w.Index(monday)) != monday {
		t.Errorf("a week does not start on Monday at midnight")
	}
	if w.Index(monday+7*86_400_000-1) != w.Index(monday) {
		t.Errorf("a week is shorter than 7 days")
	}
}

// In Santiago the clock skips midnight in September (24:00 becomes 01:00)
// and repeats the hour before it in April: the day starts at the first
// instant that reads as it, and indices never go back.
func TestCalendarSkippedAndRepeatedMidnight(t *testing.T) {
	const zone = "America/Santiago"
	c := mustCalendar(t, tb.Daily, zone)
	day := at(t, zone, "2026-09-06 12:00:00.000")
	start := c.Start(c.Index(day))
	loc, _ := time.LoadLocation(zone)
	if got := time.UnixMilli(start).In(loc).Format("2006-01-02 15:04"); got != "2026-09-06 01:00" {
		t.Errorf("the day with no midnight starts at %s", got)
	}
	if time.UnixMilli(start-1).In(loc).Day() != 5 {
		t.Errorf("the instant before the start is not the day before")
	}
	from := at(t, zone, "2026-04-04 20:00:00.000")
	prev := c.Index(from)
	for ms := from; ms < from+10*3_600_000; ms += 60_000 {
		i := c.Index(ms)
		if i < prev || c.Start(i) > ms || c.Start(i+1) <= ms {
			t.Fatalf("at %d: index %d (previous %d), start %d, next %d", ms, i, prev, c.Start(i), c.Start(i+1))
		}
		prev = i
	}
}

func TestCalendarPropertyIndexStart(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	zones := []string{"UTC", "America/New_York", "Europe/London", "Australia/Lord_Howe", "Asia/Kolkata", "America/Santiago", "Pacific/Apia"}
	for _, p := range []tb.Period{tb.Minutely, tb.Hourly, tb.Daily, tb.Weekly, tb.Monthly} {
		for _, z := range zones {
			c := mustCalendar(t, p, z)
			for range 300 {
				ms := r.Int64N(60*365*86_400_000) + 946_684_800_000 // 2000 to 2060
				i := c.Index(ms)
				if c.Start(i) > ms || c.Start(i+1) <= ms {
					t.Fatalf("%s: %d is not in period %d [%d, %d)", c, ms, i, c.Start(i), c.Start(i+1))
				}
			}
		}
	}
}

func TestNewCalendarRejects(t *testing.T) {
	for _, c := range []struct {
		p    tb.Period
		zone string
	}{{tb.NoPeriod, "UTC"}, {tb.Daily, "Mars/Olympus"}, {tb.Daily, "Local"}, {9, "UTC"}, {tb.Hourly + 1, "UTC"}} {
		if _, err := tb.NewCalendar(c.p, c.zone); err == nil {
			t.Errorf("NewCalendar(%v, %q) accepted", c.p, c.zone)
		}
	}
	a, _ := tb.NewCalendar(tb.Monthly, "")
	b, _ := tb.NewCalendar(tb.Monthly, "UTC")
	if a != b || a.String() != "month@UTC" {
		t.Errorf("calendars are not interned: %v %v", a, b)
	}
}

func budget(t *testing.T, total int64, c tb.Calendar, carry bool) tb.Limit {
	t.Helper()
	l, err := tb.Budget(tb.Millitokens(total)*tb.PerToken, c, carry)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// A budget grants its total at the period's start, refills nothing within
// it, carries a debt into the next period when told to, and tells a refused
// caller to come back at the next boundary.
func TestBudgetResetsAtBoundary(t *testing.T) {
	const ny = "America/New_York"
	c := mustCalendar(t, tb.Daily, ny)
	for _, carry := range []bool{true, false} {
		l := budget(t, 10, c, carry)
		now := at(t, ny, "2026-11-01 09:00:00.000")
		v := tb.New(l.Full(now))
		if !l.TryConsume(&v, 4*tb.PerToken, now) || l.TryConsume(&v, 7*tb.PerToken, now+3_600_000) {
			t.Fatal("the budget does not hold its total")
		}
		if !l.Charge(&v, 6*tb.PerToken, now) || l.Charge(&v, 3*tb.PerToken, now) {
			t.Fatal("a charge past the total fitted")
		}
		s := v.State()
		end := at(t, ny, "2026-11-02 00:00:00.000")
		if got := l.Tokens(s, end-1); got != -3*tb.PerToken {
			t.Errorf("at the end of the day the budget holds %d", got)
		}
		want := 10 * tb.PerToken
		if carry {
			want = 7 * tb.PerToken
		}
		if got := l.Tokens(s, end); got != want {
			t.Errorf("carry=%v: at local midnight the budget holds %d, want %d", carry, got, want)
		}
		if got := l.RetryAfter(s, tb.PerToken, now+2*3_600_000); got != time.Duration(end-now-2*3_600_000)*time.Millisecond {
			t.Errorf("retry after %v, want the time to the boundary", got)
		}
		if got := l.FullAt(s); carry && got != at(t, ny, "2026-11-03 00:00:00.000") || !carry && got != end {
			t.Errorf("carry=%v: full at %d", carry, got)
		}
	}
}

// A total raised or lowered within the period keeps what was spent.
func TestBudgetRestateKeepsSpending(t *testing.T) {
	c := mustCalendar(t, tb.Monthly, "UTC")
	old := budget(t, 100, c, true)
	now := at(t, "UTC", "2026-11-15 00:00:00.000")
	v := tb.New(old.Full(now))
	old.Charge(&v, 30*tb.PerToken, now)
	for _, total := range []int64{200, 50, 20} {
		l := budget(t, total, c, true)
		if got, want := l.Tokens(l.Restate(v.State(), old, now), now), tb.Millitokens(total-30)*tb.PerToken; got != want {
			t.Errorf("total %d: holds %d, want %d", total, got, want)
		}
	}
	// From a refilling limit, the tokens held carry over.
	rate, _ := tb.Rate(100, time.Hour, 0)
	l := budget(t, 200, c, true)
	if got := l.Tokens(l.Restate(rate.Full(now), rate, now), now); got != 100*tb.PerToken {
		t.Errorf("from a rate: holds %d", got)
	}
}

// Exact at any call rate: random charges and consumes over random instants
// across many periods spend exactly what they were granted.
func TestBudgetPropertyExact(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 5))
	c := mustCalendar(t, tb.Daily, "Europe/Berlin")
	for trial := range 50 {
		total := r.Int64N(1000) + 1
		l := budget(t, total, c, trial%2 == 0)
		now := int64(1_800_000_000_000) + r.Int64N(86_400_000)
		v := tb.New(l.Full(now))
		first := c.Index(now)
		admitted := map[int64]int64{}
		for range 400 {
			now += r.Int64N(4 * 3_600_000)
			n := r.Int64N(total/3 + 2)
			if l.TryConsume(&v, tb.Millitokens(n)*tb.PerToken, now) {
				admitted[c.Index(now)] += n
			}
			s := v.State()
			v = tb.Stored(s)
		}
		for p, n := range admitted {
			if n > total {
				t.Fatalf("trial %d: period %d admitted %d of %d", trial, p-first, n, total)
			}
		}
	}
}

// A period's index is stored in bucket levels, so it is pinned: the same
// instant has the same index in every release. (spanOf corrects an index
// that index() gets wrong by walking to the period start() defines, so
// mutants of the arithmetic of index() and of a span's end — a cache that
// misses more — are caught here, or are equivalent but for speed.)
func TestCalendarIndexIsPinned(t *testing.T) {
	ms := at(t, "UTC", "2026-11-26 19:30:00.000") // a Thursday
	for _, c := range []struct {
		p    tb.Period
		zone string
		want int64
	}{
		{tb.Minutely, "UTC", ms / 60_000},
		{tb.Hourly, "Asia/Kolkata", ms / 3_600_000},
		{tb.Daily, "UTC", 20_783},
		{tb.Daily, "Asia/Tokyo", 20_784}, // already the 27th there
		{tb.Weekly, "UTC", 2_969},        // (20,783 + 3) / 7: weeks from Monday 1969-12-29
		{tb.Monthly, "UTC", 682},         // (2026 − 1970)·12 + 10
		{tb.Monthly, "America/New_York", 682},
	} {
		cal := mustCalendar(t, c.p, c.zone)
		if got := cal.Index(ms); got != c.want {
			t.Errorf("%s: index %d, want %d", cal, got, c.want)
		}
		if got := cal.Index(ms + 1); got != c.want {
			t.Errorf("%s: index %d a millisecond later (from the cache), want %d", cal, got, c.want)
		}
	}
	jan := mustCalendar(t, tb.Monthly, "UTC")
	if got := jan.Start(0); got != 0 {
		t.Errorf("January 1970 starts at %d", got)
	}
	if got := jan.Start(-1); got != at(t, "UTC", "1969-12-01 00:00:00.000") {
		t.Errorf("December 1969 starts at %d", got)
	}
}

func TestParsePeriodAndCalendar(t *testing.T) {
	for _, p := range []tb.Period{tb.Minutely, tb.Hourly, tb.Daily, tb.Weekly, tb.Monthly} {
		if got, ok := tb.ParsePeriod(p.String()); !ok || got != p {
			t.Errorf("ParsePeriod(%q) = %v, %v", p.String(), got, ok)
		}
		c := mustCalendar(t, p, "Europe/Paris")
		if got, err := tb.ParseCalendar(c.String()); err != nil || got != c || got.Period() != p || got.Zone() != "Europe/Paris" {
			t.Errorf("ParseCalendar(%q) = %v, %v", c.String(), got, err)
		}
	}
	for _, s := range []string{"", "days", "Day", "fortnight"} {
		if _, ok := tb.ParsePeriod(s); ok {
			t.Errorf("ParsePeriod(%q) accepted", s)
		}
	}
	for _, s := range []string{"day", "day@Mars/Olympus", "year@UTC", "@UTC"} {
		if _, err := tb.ParseCalendar(s); err == nil {
			t.Errorf("ParseCalendar(%q) accepted", s)
		}
	}
	var none tb.Calendar
	if !none.IsZero() || none.Period() != tb.NoPeriod || none.Zone() != "" || none.String() != "" || tb.NoPeriod.String() != "" {
		t.Errorf("the zero Calendar is %v/%q/%q", none.Period(), none.Zone(), none.String())
	}
}
