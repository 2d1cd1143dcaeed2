package dynamo

import (
	"fmt"
	"testing"
	"time"
)

// Equivalent mutants, read by internal/mutants (make mutation):
//
// mutant: CONDITIONALS_BOUNDARY giveback.go `n < 16` giveBackBackoff: at n = 16, giveBackMinBackoff<<16 (about 55 min) is past giveBackMaxBackoff, so the wait is capped either way.
// mutant: CONDITIONALS_BOUNDARY giveback.go `giveBackMinBackoff<<n < giveBackMaxBackoff` giveBackBackoff: 50 ms·2ⁿ never equals 5 s, so < and <= agree for every n.
// mutant: ARITHMETIC_BASE giveback.go `2+1)` giveBackBackoff: d/2-1 instead of d/2+1 moves the longest wait by 2 ns out of at least 25 ms; no draw tells it from the jitter.

// checkJitter draws a jittered wait many times: each must lie in [d/2, d],
// and together they must reach both quarters at the ends of that range.
func checkJitter(t *testing.T, name string, wait func() time.Duration, d time.Duration) {
	t.Helper()
	lo, hi := d, time.Duration(0)
	for range 400 {
		w := wait()
		if w < d/2 || w > d {
			t.Fatalf("%s = %v, want within [%v, %v]", name, w, d/2, d)
		}
		lo, hi = min(lo, w), max(hi, w)
	}
	if lo > d/2+d/8 || hi < d-d/8 {
		t.Errorf("%s over 400 draws spans [%v, %v], want it to reach within %v of both ends of [%v, %v]", name, lo, hi, d/8, d/2, d)
	}
}

// TestGiveBackBackoff: background try n waits giveBackMinBackoff·2ⁿ, capped
// at giveBackMaxBackoff, jittered down to half of it.
func TestGiveBackBackoff(t *testing.T) {
	tests := []struct {
		n    int
		want time.Duration
	}{
		{0, 50 * time.Millisecond},
		{1, 100 * time.Millisecond},
		{6, 3200 * time.Millisecond},
		{7, giveBackMaxBackoff}, // 6.4 s capped
		{15, giveBackMaxBackoff},
		{16, giveBackMaxBackoff},
		{64, giveBackMaxBackoff}, // a shift past int64 does not wrap
	}
	for _, tt := range tests {
		checkJitter(t, fmt.Sprintf("giveBackBackoff(%d)", tt.n), func() time.Duration { return giveBackBackoff(tt.n) }, tt.want)
	}
}
