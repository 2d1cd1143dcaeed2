package cascade_test

import (
	"fmt"
	"testing"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

var sinkDecision cascade.Decision

// huge refills 1,000,000 tokens per minute: never exhausted by a benchmark.
var huge = tokenbucket.Limit{Capacity: 1e9, RefillAmount: 1e9, RefillPeriod: 60_000_000_000}

// benchDecide decides p the way a store does: load the levels, decide,
// read each write and its condition, keep the new levels.
func benchDecide(b *testing.B, p *cascade.Plan, slot []int, states []State) {
	b.ReportAllocs()
	levels := make([]tokenbucket.Level, len(states))
	now := t0
	for b.Loop() {
		now++
		for k, s := range states {
			levels[k] = tokenbucket.Stored(s)
		}
		sinkDecision = cascade.Decide(p, slot, levels, now)
		for k := range levels {
			levels[k].Bounds()
			levels[k].Write()
			states[k] = levels[k].State()
		}
	}
}

func BenchmarkDecide(b *testing.B) {
	for _, n := range []int{1, 2, 8} {
		b.Run(fmt.Sprintf("%ddebits", n), func(b *testing.B) {
			p := &cascade.Plan{}
			var slot []int
			var states []State
			for i := range n {
				p.Debits = append(p.Debits, consume(huge, tok))
				slot = append(slot, i)
				states = append(states, huge.Full(t0))
			}
			benchDecide(b, p, slot, states)
		})
	}
	b.Run("2debits_refused", func(b *testing.B) {
		p := &cascade.Plan{Debits: []cascade.Debit{consume(huge, tok), consume(three, 4*tok)}}
		benchDecide(b, p, []int{0, 1}, []State{huge.Full(t0), three.Full(t0)})
	})
	b.Run("12debits", func(b *testing.B) {
		p := &cascade.Plan{}
		var slot []int
		var states []State
		for i := range 12 {
			p.Debits = append(p.Debits, consume(huge, tok))
			slot = append(slot, i)
			states = append(states, huge.Full(t0))
		}
		benchDecide(b, p, slot, states)
	})
}
