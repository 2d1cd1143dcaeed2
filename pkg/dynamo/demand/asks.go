package demand

import (
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// AskWindow is how long Asks measures a bucket over at least; a measure
// stands for two windows.
const AskWindow = 250 * time.Millisecond

// Asks measures what this replica asks of each bucket it is given: what
// its decisions ask of each limit, as a share of that limit's refill, the
// largest of them (1 is as fast as the limit refills). Asked, not
// admitted: a replica refused half of what it asks still asks all of it.
// It holds at most its size in buckets, the least recently asked going
// first. Safe for concurrent use.
type Asks struct {
	mu sync.Mutex
	by *simplelru.LRU[string, *asks]
}

// asks is one bucket's: since fromMs, by limit name in milliseconds of
// that limit's refill; and from the last whole window, the ratio, which
// stands until untilMs.
type asks struct {
	fromMs, untilMs int64
	refill          map[string]float64
	ratio           float64
}

// NewAsks returns an Asks of at most size buckets.
func NewAsks(size int) *Asks {
	by, _ := simplelru.NewLRU[string, *asks](max(size, 1), nil) // errs only on a size ≤ 0
	return &Asks{by: by}
}

// Add records the debits of one decision on bucket at now (unix ms) and
// returns what this replica asks of bucket then (Ratio), with one hold of
// the lock. A calendar budget's debits do not count: its periods are the
// calendar's, not milliseconds.
func (a *Asks) Add(bucket string, debits []cascade.Debit, now int64) float64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	b, ok := a.by.Get(bucket)
	if !ok {
		b = &asks{fromMs: now, refill: map[string]float64{}}
		a.by.Add(bucket, b)
	}
	for i := range debits {
		d := &debits[i]
		if per := refillPerMs(d.Bucket); per > 0 && d.Amount > 0 {
			b.refill[d.Limit] += float64(d.Amount) / per
		}
	}
	if span := now - b.fromMs; span >= AskWindow.Milliseconds() {
		b.ratio = 0
		for _, ms := range b.refill {
			b.ratio = max(b.ratio, ms/float64(span))
		}
		b.untilMs = now + 2*AskWindow.Milliseconds()
		clear(b.refill)
		b.fromMs = now
	}
	return b.standing(now)
}

// Ratio returns what this replica asks of bucket, from its last whole
// window: 1 for as fast as its limit refills; 0 when that window ended
// more than two windows before now, or none has.
func (a *Asks) Ratio(bucket string, now int64) float64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	if b, ok := a.by.Peek(bucket); ok {
		return b.standing(now)
	}
	return 0
}

// standing is b's ratio at now: 0 once it stood its two windows.
func (b *asks) standing(now int64) float64 {
	if now < b.untilMs {
		return b.ratio
	}
	return 0
}

// Hold makes bucket asked ratio until untilMs, as if a window had measured
// it (a test's, or a replica told what it asks).
func (a *Asks) Hold(bucket string, ratio float64, now, untilMs int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.by.Add(bucket, &asks{fromMs: now, untilMs: untilMs, refill: map[string]float64{}, ratio: ratio})
}

// refillPerMs is what l refills a millisecond, 0 for a calendar budget.
func refillPerMs(l tokenbucket.Limit) float64 {
	if l.Calendar != (tokenbucket.Calendar{}) || l.RefillPeriod < time.Millisecond {
		return 0
	}
	return float64(l.RefillAmount) / float64(l.RefillPeriod.Milliseconds())
}
