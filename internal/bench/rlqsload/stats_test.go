//go:build rlqsbench

package rlqsload

import (
	"fmt"
	"slices"
	"time"
)

// quantiles are the fractions reported for each kind.
var quantiles = []float64{0.50, 0.90, 0.99, 0.999}

// summary holds the quantiles of one kind's latencies.
type summary []time.Duration

// summarize returns the quantiles of ds (sorted in place).
func summarize(ds []time.Duration) summary {
	slices.Sort(ds)
	s := make(summary, len(quantiles))
	for i, q := range quantiles {
		s[i] = ds[min(len(ds)-1, int(q*float64(len(ds))))]
	}
	return s
}

// p99 returns the 99th percentile.
func (s summary) p99() time.Duration { return s[2] }

// String prints the quantiles in milliseconds.
func (s summary) String() string {
	return fmt.Sprintf("%s / %s / %s / %s", ms(s[0]), ms(s[1]), ms(s[2]), ms(s[3]))
}

// minus prints s's quantiles less base's, in milliseconds with a sign.
func (s summary) minus(base summary) string {
	out := ""
	for i := range s {
		if i > 0 {
			out += " / "
		}
		out += signed(s[i] - base[i])
	}
	return out
}

// ms prints d in milliseconds.
func ms(d time.Duration) string { return fmt.Sprintf("%.3f ms", d.Seconds()*1e3) }

// signed prints d in milliseconds with a sign.
func signed(d time.Duration) string { return fmt.Sprintf("%+.3f ms", d.Seconds()*1e3) }
