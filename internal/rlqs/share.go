package rlqs

import (
	"math"
	"time"

	"github.com/dynalimit/dynalimit/internal/service"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// demand is what the share arithmetic knows of one bucket's demand, in
// requests per second.
type demand struct {
	// own is the reporting stream's demand; negative when unknown (the
	// bucket's first report, whose time_elapsed is 0).
	own float64
	// local is the demand of this replica's streams watching the bucket,
	// own included, and streams how many they are.
	local   float64
	streams int
	// fleet is every replica's demand, read from the store's demand meter;
	// 0 when unknown.
	fleet float64
	// others: the meter holds demand charged before this report's, so
	// the bucket has (or had) other users, perhaps on other replicas.
	others bool
}

// fraction is the reporting stream's share of the bucket's limits, in
// [0, 1]:
//   - its demand over the fleet's (or this replica's, when the store has
//     told less; twice this replica's when the store has not told the
//     fleet's yet but its meter shows others' demand);
//   - when its demand is unknown (a provisional share, at once): the
//     average demand of the other streams watching the bucket here, or
//     1/streams when none of theirs is known (1/2 for a sole stream when
//     the store's meter shows others' demand);
//   - 1/streams when nobody demands anything;
//   - 0 when it demands nothing while others do: it gives its share back
//     (the assignment keeps a trickle, see tokenRate).
func fraction(d demand) float64 {
	if d.own < 0 {
		// A newcomer: provisionally as much as the average of this
		// replica's other streams, or 1/n of the n streams known to use
		// the bucket (anyone elsewhere counting as one).
		if others := d.streams - 1; others > 0 && d.local > 0 {
			d.own = d.local / float64(others)
			d.local += d.own
			d.fleet += d.own
		} else {
			n := max(d.streams, 1)
			if d.others {
				n++
			}
			return 1 / float64(n)
		}
	}
	if d.fleet <= 0 && d.others {
		// The store has not told the fleet's demand, but others use the
		// bucket: provisionally as much as this replica's.
		d.fleet = 2 * max(d.local, d.own)
	}
	total := max(d.fleet, d.local, d.own)
	if total <= 0 {
		return 1 / float64(max(d.streams, 1))
	}
	return min(d.own/total, 1)
}

// allowance is a limit's rate for the fleet, in tokens per second: its
// refill rate, less what others than quota reports consume of it
// (external, tokens per second: ShouldRateLimit decisions), less what
// repays within ttl the debt the store says it is in, just before the
// stream's own charge (charged, in tokens), beyond what reporting
// explains (debtSlack). It is never negative.
func allowance(l service.QuotaLimit, known bool, charged, external float64, ttl time.Duration) float64 {
	b := l.Bucket
	if b.Validate() != nil {
		return 0
	}
	remaining := float64(l.Remaining) / float64(tokenbucket.PerToken)
	if !b.Calendar.IsZero() {
		// A calendar budget refills at its period's start: share what it
		// holds over the assignment's life instead.
		if !known || ttl <= 0 {
			return 0
		}
		return math.Max(remaining, 0) / ttl.Seconds()
	}
	rate := float64(b.RefillAmount)/float64(tokenbucket.PerToken)/b.RefillPeriod.Seconds() - external
	if known && ttl > 0 {
		if excess := -(remaining + charged) - debtSlack(b); excess > 0 {
			rate -= excess / ttl.Seconds()
		}
	}
	return math.Max(rate, 0)
}

// debtSlack is how deep in debt, in tokens, a limit may be found just
// before a stream's charge while the fleet admits exactly its rate: the
// other streams' charges of up to a report interval each land at other
// times than the stream's, and the bucket refills to its capacity at
// most, so the depth seen depends on when a stream reports. Two intervals
// of the rate and the capacity leave that out, so that streams reporting
// at different times do not correct alike debts differently; debt past
// it is over-admission (ShouldRateLimit traffic the external estimate
// missed, a start that admitted more, a replica gone astray).
func debtSlack(b tokenbucket.Limit) float64 {
	rate := float64(b.RefillAmount) / float64(tokenbucket.PerToken) / b.RefillPeriod.Seconds()
	return 2*rate*reportInterval.Seconds() + float64(b.Capacity)/float64(tokenbucket.PerToken)
}

// reportInterval is how often Envoy 1.40 reports, whatever its
// configuration asks (envoy #46033).
const reportInterval = 5 * time.Second

// grant is one stream's token bucket for a bucket: Envoy's
// envoy.type.v3.TokenBucket.
type grant struct {
	maxTokens     uint32
	tokensPerFill uint32
	fillInterval  time.Duration
}

// maxFill is the longest fill interval a grant uses: Envoy 1.40 reports
// every 5 s, and a fill longer than that would hold tokens back across
// reports.
const maxFill = reportInterval

// tokenRate turns a rate (tokens per second) and a burst (tokens) into
// Envoy's token bucket. Envoy 1.40 reads a fill interval in whole seconds
// only, so the interval is 1 to maxFill whole seconds, the one whose whole
// tokens per fill come closest to the rate (the shortest among equals), or
// for a rate under one token per maxFill, one token per fill at the
// interval that rate asks (a trickle: an idle stream keeps one token a
// report interval). max_tokens is the burst, at least one fill.
func tokenRate(rate, burst float64) grant {
	if !(rate*maxFill.Seconds() >= 1) { // also NaN
		secs := maxFill.Seconds()
		if rate > 0 {
			secs = math.Min(math.Ceil(1/rate), 24*3600)
		}
		return grant{maxTokens: 1, tokensPerFill: 1, fillInterval: time.Duration(secs) * time.Second}
	}
	best, bestErr := grant{}, math.Inf(1)
	for s := 1; s <= int(maxFill/time.Second); s++ {
		want := rate * float64(s)
		got := math.Round(want)
		if got < 1 || got > math.MaxUint32 {
			continue
		}
		if e := math.Abs(got-want) / want; e < bestErr-1e-9 {
			best, bestErr = grant{tokensPerFill: uint32(got), fillInterval: time.Duration(s) * time.Second}, e
		}
		if bestErr < 0.005 {
			break
		}
	}
	best.maxTokens = best.tokensPerFill
	if b := math.Round(burst); b > float64(best.maxTokens) {
		best.maxTokens = uint32(math.Min(b, math.MaxUint32))
	}
	return best
}

// shareOf is the stream's grant for a bucket charged as q: its fraction of
// the tightest of the bucket's limits (rate and burst), each limit's
// allowance as the store left it. known says whether the store answered,
// charged what the report charged, external what others consume of each
// limit (nil: unknown).
func shareOf(q *service.Quota, frac float64, known bool, charged float64, external []float64, ttl time.Duration) (grant, float64) {
	rate, burst := math.Inf(1), 0.0
	for i, l := range q.Limits {
		ext := 0.0
		if i < len(external) {
			ext = external[i]
		}
		a := allowance(l, known, charged, ext, ttl) * frac
		if a < rate {
			rate = a
			burst = float64(l.Bucket.Capacity) / float64(tokenbucket.PerToken) * frac
		}
	}
	if math.IsInf(rate, 1) {
		rate = 0
	}
	return tokenRate(rate, burst), rate
}
