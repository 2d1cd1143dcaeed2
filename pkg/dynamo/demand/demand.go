package demand

import (
	"math"
	"sync"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo/item"
)

// The estimate: sums weighted by e^(−age/TauMs); a part is known once
// its images span HistoryMs.
const (
	TauMs     = 5000
	HistoryMs = 1000
	// maxLimits bounds the limits followed, and maxShards the shards
	// whose last counter is kept (least recently used dropped first).
	maxLimits = 1 << 14
	maxShards = 1 << 15
)

// limit is what this replica saw of one limit of one bucket: its own
// debits and the fleet's consumption, both weighted to atMs.
type limit struct {
	own, fleet float64
	atMs       int64 // when own and fleet were last weighted
	sinceMs    int64 // its first image
	// baseline: its last image was the first of a shard, with nothing to
	// count from: what this replica debited by that write is in it, so
	// the next debit recorded is not counted.
	baseline bool
}

// age weighs l's sums to now.
func (l *limit) age(now int64) {
	if now <= l.atMs {
		return
	}
	f := math.Exp(-float64(now-l.atMs) / TauMs)
	l.own *= f
	l.fleet *= f
	l.atMs = now
}

// Table follows the limits of the buckets a replica writes. It is safe for
// concurrent use.
type Table struct {
	mu     sync.Mutex
	limits *simplelru.LRU[name, *limit]
	last   *simplelru.LRU[shard, int64] // its counter in the last image
}

// name names a limit of a bucket: the bucket's namespace, entity and
// resource, and the limit's attribute prefix (item.LimitPrefix).
type name struct{ ns, entity, resource, prefix string }

// shard names a limit of one shard of a bucket: the shard's key and the
// limit's attribute prefix.
type shard struct{ pk, prefix string }

// New returns an empty table.
func New() *Table {
	limits, _ := simplelru.NewLRU[name, *limit](maxLimits, nil) // errs only on a size ≤ 0
	last, _ := simplelru.NewLRU[shard, int64](maxShards, nil)
	return &Table{limits: limits, last: last}
}

func nameOf(ns string, k cascade.Key, prefix string) name {
	return name{ns: ns, entity: k.Entity, resource: k.Resource, prefix: prefix}
}

// Saw counts what the fleet consumed on each limit of img, the image of
// the shard pk of k's bucket in namespace ns that arrived at now, since
// the image of that shard before it. A counter that went down (refunds, a
// reset) counts nothing.
func (t *Table) Saw(pk, ns string, k cascade.Key, img *item.Image, now int64) {
	if t == nil || img == nil || !img.Exists {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for p, li := range img.Limits {
		n := nameOf(ns, k, p)
		l, ok := t.limits.Get(n)
		if !ok {
			l = &limit{atMs: now, sinceMs: now}
			t.limits.Add(n, l)
		}
		l.age(now)
		prev, had := t.last.Get(shard{pk: pk, prefix: p})
		t.last.Add(shard{pk: pk, prefix: p}, li.Consumed)
		switch {
		case !had:
			l.baseline = true
		case li.Consumed > prev:
			l.fleet += float64(li.Consumed - prev)
		}
	}
}

// Debited counts what plan p (its keys in the store's namespace), decided
// as dec at now, debited on the limits followed: a consume admitted, a
// charge not left undecided. Nothing is counted of a plan that failed
// (err): what it wrote, if anything, counts once it shows in an image.
func (t *Table) Debited(p *cascade.Plan, dec *cascade.Decision, err error, now int64) {
	if t == nil || p == nil || err != nil || len(dec.Statuses) != len(p.Debits) {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := range p.Debits {
		d, st := &p.Debits[i], &dec.Statuses[i]
		if st.Contended || d.Amount <= 0 || !(d.Op == cascade.Charge || d.Op == cascade.Consume && dec.Admitted && st.OK) {
			continue
		}
		l, ok := t.limits.Peek(nameOf(d.Key.Namespace, d.Key, item.LimitPrefix(d.Limit)))
		switch {
		case !ok:
		case l.baseline:
			l.baseline = false
		default:
			l.age(now)
			l.own += float64(d.Amount)
		}
	}
}

// Part returns this replica's part, 0 to 1, of the recent consumption of
// d's limit (its bucket in namespace ns), and whether it knows one: its
// images span HistoryMs and the fleet consumed something.
func (t *Table) Part(ns string, d *cascade.Debit) (float64, bool) {
	if t == nil {
		return 0, false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	l, ok := t.limits.Peek(nameOf(ns, d.Key, item.LimitPrefix(d.Limit)))
	if !ok || l.fleet <= 0 || l.atMs-l.sinceMs < HistoryMs {
		return 0, false
	}
	return min(l.own/l.fleet, 1), true
}
