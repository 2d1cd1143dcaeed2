package tokenbucket

import (
	"math/rand/v2"
	"testing"
	"time"
)

// civilDays and civilDate agree with the time package on every day from
// year -2000 to 4000, both ways.
//
// Mutants of calendar.go that only make a period's first guess worse are
// equivalent but for speed: spanOf walks from index()'s guess to the period
// start() defines (index() and the end of a span, which only sizes the
// cache). The indices themselves are pinned by TestCalendarIndexIsPinned.
//
// mutant: ARITHMETIC_BASE calendar.go `(idx + 1) * w` a fixed window's end only sizes the cache: a wrong end misses and recomputes the same span
// mutant: CONDITIONALS_BOUNDARY calendar.go `s.start <= ms` at ms = a span's start the cache misses and recomputes the same span
// mutant: CONDITIONALS_BOUNDARY calendar.go `c.start(idx) > ms` at start(idx) = ms the second loop steps back to idx: the same index
// mutant: CONDITIONALS_BOUNDARY calendar.go `c.start(idx+1) <= ms` at ms = start(idx+1) the local date is the new period's, so index() already guessed idx+1
// mutant: ARITHMETIC_BASE calendar.go `end: c.start(idx + 1)` a span's end only sizes the cache: a wrong end misses and recomputes
// mutant: ARITHMETIC_BASE calendar.go `days+3, 7` a week's first guess off by one is walked to the week start() defines
// mutant: INVERT_NEGATIVES calendar.go `int64(m) - 1 - 1970*12` a month's first guess off by two is walked to the month start() defines
// mutant: ARITHMETIC_BASE calendar.go `int64(y)*12 + int64(m) - 1 - 1970*12` a month's first guess off by a few is walked to the month start() defines (far off: the walk times out, and the mutant is killed)
func TestCivilDays(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 8))
	epoch := time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)
	check := func(days int64) {
		tm := epoch.AddDate(0, 0, int(days))
		y, m, d := tm.Date()
		if got := civilDays(y, m, d); got != days {
			t.Fatalf("civilDays(%d-%d-%d) = %d, want %d", y, m, d, got, days)
		}
		if gy, gm, gd := civilDate(days); gy != y || gm != m || gd != d {
			t.Fatalf("civilDate(%d) = %d-%d-%d, want %d-%d-%d", days, gy, gm, gd, y, m, d)
		}
	}
	for days := int64(-800); days < 800; days++ {
		check(days) // every day around the epoch, every month end and leap day
	}
	// Each era's edges: the last day of a 400-year era is a 29 February.
	for _, y := range []int{1600, 1700, 1900, 2000, 2100, 2400} {
		for _, d := range []time.Time{time.Date(y, 2, 28, 0, 0, 0, 0, time.UTC), time.Date(y, 3, 1, 0, 0, 0, 0, time.UTC)} {
			days := d.Unix() / 86_400 // whole days: the dates are at midnight UTC
			check(days - 1)
			check(days)
			check(days + 1)
		}
	}
	for range 20000 {
		check(r.Int64N(6000*366) - 3970*366)
	}
}
