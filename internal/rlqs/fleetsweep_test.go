//go:build rlqsfleetsim

// The fleet simulation's sweep, behind a build tag for its time (900
// runs):
//
//	go test -tags rlqsfleetsim -run TestFleetSimSweep -v ./internal/rlqs

package rlqs

import (
	"fmt"
	"testing"
	"time"
)

// TestFleetSimSweep runs the fleet over a grid of store latencies, report
// spacings, the replicas' delays and report phases, and prints each run's windows
// (FAIL past ±5%) and how many failed.
func TestFleetSimSweep(t *testing.T) {
	ms := func(v int) time.Duration { return time.Duration(v) * time.Millisecond }
	bad, runs := 0, 0
	for _, lat := range []int{1, 6, 20, 60, 200} {
		for _, spacing := range []int{0, 5, 20} {
			for _, off := range [][2]int{{2100, 2900}, {2500, 2600}, {2000, 3000}} {
				for start := 0; start < 10000; start += 500 {
					rates, per := runFleetSim(t, [2]time.Duration{ms(off[0]), ms(off[1])}, ms(start), ms(spacing), ms(lat))
					line := fmt.Sprintf("latency %3d ms, spacing %2d ms, offsets %v ms, start %5d ms:", lat, spacing, off, start)
					fail := false
					for k, r := range rates {
						fail = fail || r < 95 || r > 105
						line += fmt.Sprintf(" %v %.1f/s", per[k], r)
					}
					runs++
					if fail {
						bad++
						line += " FAIL"
					}
					fmt.Println(line)
				}
			}
		}
	}
	t.Logf("%d of %d runs had a window past ±5%%", bad, runs)
}
