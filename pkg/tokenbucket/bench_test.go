package tokenbucket_test

import (
	"testing"
	"time"
)

var (
	sinkState State
	sinkOK    bool
	sinkDur   time.Duration
)

// benchLimit is 1,000,000 tokens per minute: a refill on every call.
var benchLimit = Limit{Capacity: 1e9, RefillAmount: 1e9, RefillPeriod: time.Minute}

func BenchmarkRefill(b *testing.B) {
	b.ReportAllocs()
	s := State{Tokens: 0, LastRefill: 0}
	var now int64
	for b.Loop() {
		now++
		s = benchLimit.Refill(s, now)
		s.Tokens = 0
	}
	sinkState = s
}

func BenchmarkTryConsume(b *testing.B) {
	b.ReportAllocs()
	s := benchLimit.Full(0)
	var now int64
	for b.Loop() {
		now++
		var ok bool
		s, ok = benchLimit.TryConsume(s, 20_000, now)
		sinkOK = ok
	}
	sinkState = s
}

func BenchmarkRetryAfter(b *testing.B) {
	b.ReportAllocs()
	s := State{Tokens: -5e8, LastRefill: 0}
	var now int64
	for b.Loop() {
		now++
		sinkDur = benchLimit.RetryAfter(s, 1000, now)
	}
}

func BenchmarkTimeToFull(b *testing.B) {
	b.ReportAllocs()
	s := State{Tokens: -5e8, LastRefill: 0}
	var now int64
	for b.Loop() {
		now++
		sinkDur = benchLimit.TimeToFull(s, now)
	}
}
