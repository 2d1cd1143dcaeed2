package tokenbucket_test

import (
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

var (
	sinkState State
	sinkOK    bool
	sinkDur   time.Duration
)

// benchLimit is 1,000,000 tokens per minute: never exhausted by a benchmark.
var benchLimit = Limit{Capacity: 1e9, RefillAmount: 1e9, RefillPeriod: time.Minute}

// BenchmarkTryConsume is one decision the way a store makes it: load the
// level, consume, read the write and its condition.
func BenchmarkTryConsume(b *testing.B) {
	b.ReportAllocs()
	s := benchLimit.Full(0)
	var now int64
	for b.Loop() {
		now++
		v := tokenbucket.Stored(s)
		sinkOK = benchLimit.TryConsume(&v, 20_000, now)
		v.Bounds()
		v.Write()
		s = v.State()
	}
	sinkState = s
}

func BenchmarkRetryAfter(b *testing.B) {
	b.ReportAllocs()
	s := holding(benchLimit, -5e8, 0)
	var now int64
	for b.Loop() {
		now++
		sinkDur = benchLimit.RetryAfter(s, 1000, now)
	}
}

func BenchmarkTokens(b *testing.B) {
	b.ReportAllocs()
	s := holding(benchLimit, -5e8, 0)
	var now int64
	var sink Millitokens
	for b.Loop() {
		now++
		sink += benchLimit.Tokens(s, now)
	}
	sinkOK = sink > 0
}

func BenchmarkParseInt128(b *testing.B) {
	b.ReportAllocs()
	const s = "-99999999999999999999999999999999999999"
	for b.Loop() {
		v, _ := tokenbucket.ParseInt128(s)
		sinkState = State{X: v}
	}
}

func BenchmarkString(b *testing.B) {
	b.ReportAllocs()
	v := tokenbucket.MaxLevel.Neg()
	var n int
	for b.Loop() {
		n += len(v.String())
	}
	sinkOK = n > 0
}
