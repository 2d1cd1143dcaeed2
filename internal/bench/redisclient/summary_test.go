//go:build redisbench

package redisclient

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// median returns the median of xs (the mean of the middle two if even).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// metric is one column of the summary: its name and how to read it from a cell.
type metric struct {
	name string
	get  func(*cell) float64
	fmt  func(float64) string
}

func us(v float64) string { return fmt.Sprintf("%.1f µs", v) }

var metrics = []metric{
	{"decisions/s", func(c *cell) float64 { return c.opsPerSec() }, func(v float64) string { return fmt.Sprintf("%.0f", v) }},
	{"p50", func(c *cell) float64 { return micros(c.p50) }, us},
	{"p99", func(c *cell) float64 { return micros(c.p99) }, us},
	{"client CPU/op", func(c *cell) float64 { return micros(c.cpuPerOp) }, us},
	{"allocs/op", func(c *cell) float64 { return c.allocsPerOp }, func(v float64) string { return fmt.Sprintf("%.1f", v) }},
	{"EVALSHA/op", func(c *cell) float64 { return c.evalshaPerOp }, func(v float64) string { return fmt.Sprintf("%.2f", v) }},
	{"bytes in/op", func(c *cell) float64 { return c.bytesInPerOp }, func(v float64) string { return fmt.Sprintf("%.0f", v) }},
	{"EVALSHA/read", func(c *cell) float64 { return c.callsPerRead }, func(v float64) string { return fmt.Sprintf("%.1f", v) }},
	{"Redis CPU/op", func(c *cell) float64 { return micros(c.serverCPUOp) }, us},
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// summary prints, per key set and concurrency, each client's medians over
// the rounds and, for every other client, the median of the per-round
// ratios first client ÷ that client.
func summary(cells []cell, names, keySets []string, concs []int) string {
	var b strings.Builder
	b.WriteString("| keys | callers | client |")
	for _, m := range metrics {
		b.WriteString(" " + m.name + " |")
	}
	b.WriteString("\n|---|---|---|" + strings.Repeat("---|", len(metrics)) + "\n")
	for _, keys := range keySets {
		for _, conc := range concs {
			byClient := map[string][]*cell{}
			for i := range cells {
				c := &cells[i]
				if c.keys == keys && c.conc == conc {
					byClient[c.client] = append(byClient[c.client], c)
				}
			}
			for _, name := range names {
				fmt.Fprintf(&b, "| %s | %d | %s |", keys, conc, name)
				for _, m := range metrics {
					var xs []float64
					for _, c := range byClient[name] {
						xs = append(xs, m.get(c))
					}
					b.WriteString(" " + m.fmt(median(xs)) + " |")
				}
				b.WriteString("\n")
			}
			for _, other := range names[1:] {
				fmt.Fprintf(&b, "| %s | %d | %s ÷ %s |", keys, conc, names[0], other)
				for _, m := range metrics {
					var xs []float64
					for r, c := range byClient[names[0]] {
						if r < len(byClient[other]) && m.get(byClient[other][r]) != 0 {
							xs = append(xs, m.get(c)/m.get(byClient[other][r]))
						}
					}
					fmt.Fprintf(&b, " %.2f |", median(xs))
				}
				b.WriteString("\n")
			}
		}
	}
	return b.String()
}
