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
	for range 20000 {
		check(r.Int64N(6000*366) - 3970*366)
	}
}
