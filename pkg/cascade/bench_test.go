package cascade_test

import (
	"testing"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

var sinkDecision cascade.Decision

// big refills 1,000,000 tokens per minute: never exhausted by a benchmark.
var big = tokenbucket.Limit{Capacity: 1e9, RefillAmount: 1e9, RefillPeriod: 60_000_000_000}

func benchDecide(b *testing.B, p *cascade.Plan, slot []int, states []State) {
	b.ReportAllocs()
	now := t0
	for b.Loop() {
		now++
		sinkDecision = cascade.Decide(p, slot, states, now)
	}
}

func BenchmarkDecide(b *testing.B) {
	b.Run("1debit", func(b *testing.B) {
		p := &cascade.Plan{Debits: []cascade.Debit{consume(big, tok)}}
		benchDecide(b, p, []int{0}, []State{big.Full(t0)})
	})
	b.Run("2debits", func(b *testing.B) {
		p := &cascade.Plan{Debits: []cascade.Debit{consume(big, tok), consume(big, 50*tok)}}
		benchDecide(b, p, []int{0, 1}, []State{big.Full(t0), big.Full(t0)})
	})
	b.Run("2debits_refused", func(b *testing.B) {
		p := &cascade.Plan{Debits: []cascade.Debit{consume(big, tok), consume(three, 4*tok)}}
		benchDecide(b, p, []int{0, 1}, []State{big.Full(t0), three.Full(t0)})
	})
	b.Run("12debits", func(b *testing.B) {
		p := &cascade.Plan{}
		var slot []int
		var states []State
		for i := range 12 {
			p.Debits = append(p.Debits, consume(big, tok))
			slot = append(slot, i)
			states = append(states, big.Full(t0))
		}
		benchDecide(b, p, slot, states)
	})
}
