package dynamo

import (
	"math"
	"sync"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo/item"
)

// Demand's estimate: decayed sums of millitokens, each weighing what
// happened demandTauMs ago by 1/e, so that about the last demandTauMs
// count; an estimate stands once its observations span demandHistoryMs.
const (
	demandTauMs     = 5000
	demandHistoryMs = 1000
	// maxDemands bounds the limits whose demand is followed.
	maxDemands = 1 << 14
)

// demand is what this replica saw of one limit of one bucket: the
// consumption it debited itself and the consumption of the whole fleet,
// from the item's running counter (item.LimitImage.Consumed) in the
// images DynamoDB returned, both decayed to atMs.
type demand struct {
	own, fleet float64
	atMs       int64 // when own and fleet were last decayed
	sinceMs    int64 // the first image of it
	// baseline: the last image came without one before it to count from,
	// so what this replica debited by that write is in the baseline and
	// not in fleet: the next debit it records is not counted.
	baseline bool
}

// decay brings d's sums to now.
func (d *demand) decay(now int64) {
	if now <= d.atMs {
		return
	}
	f := math.Exp(-float64(now-d.atMs) / demandTauMs)
	d.own *= f
	d.fleet *= f
	d.atMs = now
}

// demands follows, per limit of a bucket, this replica's part of the
// recent consumption: the store's ON_UNAVAILABLE=local share (Demand). It
// has a lock of its own: it is told of every decision.
type demands struct {
	mu sync.Mutex
	m  *simplelru.LRU[string, *demand] // base\x00limit prefix → demand
}

func newDemands() *demands {
	m, _ := simplelru.NewLRU[string, *demand](maxDemands, nil) // errs only on a size ≤ 0
	return &demands{m: m}
}

// saw counts what the fleet consumed on each limit of base between old
// and img, two images of one shard (old nil: none to count from). A
// counter that went down (refunds, a reset) counts nothing.
func (ds *demands) saw(base string, old, img *item.Image, now int64) {
	if ds == nil || img == nil || !img.Exists {
		return
	}
	ds.mu.Lock()
	defer ds.mu.Unlock()
	for p, l := range img.Limits {
		k := base + "\x00" + p
		d, ok := ds.m.Get(k)
		if !ok {
			d = &demand{atMs: now, sinceMs: now}
			ds.m.Add(k, d)
		}
		d.decay(now)
		prev, had := old.Has(p)
		if !had {
			d.baseline = true
			continue
		}
		if delta := l.Consumed - prev.Consumed; delta > 0 {
			d.fleet += float64(delta)
		}
	}
}

// debited counts what plan p, decided as dec, debited on the buckets this
// replica follows: a consume admitted, a charge not left undecided.
// Nothing is counted of a plan that failed (err): what it wrote, if
// anything, is counted once it shows in an image.
func (ds *demands) debited(p *cascade.Plan, buckets []bucket, dec *cascade.Decision, err error, now int64) {
	if ds == nil || err != nil || len(dec.Statuses) != len(p.Debits) {
		return
	}
	ds.mu.Lock()
	defer ds.mu.Unlock()
	for i := range p.Debits {
		db, st := &p.Debits[i], &dec.Statuses[i]
		if st.Contended || db.Amount <= 0 || !(db.Op == cascade.Charge || db.Op == cascade.Consume && dec.Admitted && st.OK) {
			continue
		}
		d, ok := ds.m.Peek(baseOf(buckets, db.Key) + "\x00" + item.LimitPrefix(db.Limit))
		if !ok {
			continue
		}
		if d.baseline {
			d.baseline = false
			continue
		}
		d.decay(now)
		d.own += float64(db.Amount)
	}
}

// part returns this replica's part of the recent consumption of base's
// limit prefix, and whether it knows one: its observations span at least
// demandHistoryMs and the fleet consumed something.
func (ds *demands) part(base, prefix string) (float64, bool) {
	if ds == nil {
		return 0, false
	}
	ds.mu.Lock()
	defer ds.mu.Unlock()
	d, ok := ds.m.Peek(base + "\x00" + prefix)
	if !ok || d.fleet <= 0 || d.atMs-d.sinceMs < demandHistoryMs {
		return 0, false
	}
	return min(d.own/d.fleet, 1), true
}

func baseOf(buckets []bucket, k cascade.Key) string {
	for i := range buckets {
		if buckets[i].key == k {
			return buckets[i].base
		}
	}
	return ""
}

// Demand returns this replica's part of the recent consumption of debit
// d's bucket (0 to 1), and whether it knows one. The part is what this
// replica debited on it over what the whole fleet did, as the bucket's
// running consumption counter showed in the images DynamoDB returned to
// this replica, both weighted to the last 5 s or so; it is known once
// those images span a second. It makes no call, and stays what it was
// while no image arrives: ON_UNAVAILABLE=local sizes an item's local
// bucket by it.
func (s *Store) Demand(d *cascade.Debit) (part float64, known bool) {
	ns := s.ns(d.Key)
	base := item.NSPart(ns) + "/" + item.Esc(d.Key.Entity) + "#" + item.Esc(d.Key.Resource)
	return s.demand.part(base, item.LimitPrefix(d.Limit))
}
