package dynamo

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo/item"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// bucket is one bucket item of a plan, all shards of it.
type bucket struct {
	key  cascade.Key
	ns   string
	base string // escaped namespace, entity and resource: shard counts and refusals are kept by it
}

func (b bucket) pk(shard int) string { return item.BucketPK(b.ns, b.key.Entity, b.key.Resource, shard) }

// bucketsOf returns the distinct bucket items of p, in plan order.
func (s *Store) bucketsOf(p *cascade.Plan) []bucket {
	var out []bucket
	for i := range p.Debits {
		k := p.Debits[i].Key
		seen := false
		for j := range out {
			if out[j].key == k {
				seen = true
				break
			}
		}
		if !seen {
			out = append(out, s.bucketOf(k))
		}
	}
	return out
}

// bucketOf returns the bucket item of key k.
func (s *Store) bucketOf(k cascade.Key) bucket {
	ns := s.ns(k)
	return bucket{key: k, ns: ns, base: item.NSPart(ns) + "/" + item.Esc(k.Entity) + "#" + item.Esc(k.Resource)}
}

// partKind is what a part is for.
type partKind uint8

const (
	// decisionPart: the debits of a plan being decided.
	decisionPart partKind = iota
	// giveBackPart: the refund of what a part of a refused plan consumed
	// (compensation), its amounts already scaled (part.scale).
	giveBackPart
	// repayPart: a replica's repayment of what it decided locally
	// (part.repay), always on shard 0, applied once per stamp.
	repayPart
)

// part is the debits of one plan on one bucket item: what an item's lane
// decides. Fields below the line are the lane's to write until done closes.
type part struct {
	kind   partKind
	b      bucket
	debits []cascade.Debit // in plan order; amounts for one whole bucket unless scale > 0
	idx    []int           // each debit's index in the plan
	// scale, when set, says the amounts are already multiplied for that
	// shard count (a compensation gives back exactly what was taken).
	scale int
	of    *part // the part a compensation gives back for
	// repay is a repayment's replica and stamp (repayPart only).
	repay *repayTag
	// from is the context of the decision the part belongs to, for its
	// values only (see WithCallContext).
	from  context.Context
	shard int
	pk    string
	tried int // other shards tried after a refusal

	done  chan struct{}
	taken bool // a lane runner holds it (guarded by lanes.mu)
	dec   cascade.Decision
	err   error
	n     int        // shard count the decision was made with
	start *partStart // what the decision was made on (nil: not by a batch)
	dup   bool       // a repayment the item had applied: nothing written
}

// givesBack reports whether pt is a give-back rather than a decision.
func (pt *part) givesBack() bool { return pt.kind == giveBackPart }

// ended reports whether pt needs no other try: it failed, it was
// admitted, or its budget ran out.
func (pt *part) ended(ctx context.Context) bool {
	return pt.err != nil || pt.dec.Admitted || ctx.Err() != nil
}

// mayTryAnotherShard reports whether pt, refused on one shard, may try
// another: a decision with nothing to charge or refund, on a bucket of
// more than one shard, that has not tried two other shards or all of them.
func (pt *part) mayTryAnotherShard() bool {
	return pt.n > 1 && pt.kind == decisionPart && !pt.hasCost() && !pt.triedShards()
}

// triedShards reports whether pt has tried as many other shards as it may:
// two, or every other one.
func (pt *part) triedShards() bool { return pt.tried >= 2 || pt.tried+1 >= pt.n }

// itemError is pt's failure as a cascade.ItemError naming its item.
func (pt *part) itemError() error {
	return &cascade.ItemError{Key: pt.b.key, Err: pt.err}
}

// partsOf splits p by bucket item. When the plan spans several items, each
// part decides its quota debits as advisory (taken if they fit): the plan's
// admission rule is applied over all parts afterwards.
func (s *Store) partsOf(p *cascade.Plan, buckets []bucket) []*part {
	parts := make([]*part, len(buckets))
	for i, b := range buckets {
		parts[i] = &part{kind: decisionPart, b: b}
	}
	for i := range p.Debits {
		d := p.Debits[i]
		for _, pt := range parts {
			if pt.b.key != d.Key {
				continue
			}
			if len(buckets) > 1 && d.Role == cascade.Quota {
				d.Role = cascade.Advisory
			}
			pt.debits = append(pt.debits, d)
			pt.idx = append(pt.idx, i)
		}
	}
	for _, pt := range parts {
		pt.choose(pacer{s}.shardAsking(pt.b, pt.debits))
	}
	return parts
}

func (pt *part) choose(shard int) {
	pt.shard, pt.pk = shard, pt.b.pk(shard)
	pt.done, pt.taken, pt.dec, pt.err, pt.start, pt.dup = make(chan struct{}), false, cascade.Decision{}, nil, nil, false
}

// errShardGone ends a batch on a shard that a merge removed (image.gone):
// nothing was written, and its parts go to a shard that counts (rehome).
var errShardGone = fmt.Errorf("dynamo: shard merged away: %w", errContended)

// shardPending ends a batch on a shard a doubling created that holds
// nothing yet (toPair): nothing was written, and a decision goes to pair.
type shardPending struct{ pair int }

func (e *shardPending) Error() string { return "dynamo: shard not yet admitted by its doubling" }
func (e *shardPending) Unwrap() error { return errContended }

// rehome moves pt, whose shard a merge removed, to a shard of the count
// learned since. A give-back's amounts, multiplied for the shard count it
// was taken on, are multiplied for the new count instead: it gives back
// the same share of the whole bucket.
func (s *Store) rehome(pt *part) {
	n := cacher{s}.shardCount(pt.b.base)
	if pt.scale > 0 && pt.scale != n {
		for i := range pt.debits {
			pt.debits[i].Amount = mulSat(pt.debits[i].Amount/tokenbucket.Millitokens(pt.scale), n)
		}
		pt.scale = n
	}
	pt.choose(pacer{s}.shardFor(pt.b))
}

// pickShard returns a random shard below n.
func (s *Store) pickShard(n int) int {
	if n <= 1 {
		return 0
	}
	return rand.IntN(n)
}

// plan returns the part's debits as the lane decides them on an item of n
// shards: a shard's level is kept in whole-bucket units and holds 1/n of
// it, so every amount counts n times.
func (pt *part) plan(n int) *cascade.Plan {
	if pt.givesBack() {
		n = 1
	}
	q := &cascade.Plan{Debits: append([]cascade.Debit(nil), pt.debits...)}
	if n > 1 {
		for i := range q.Debits {
			q.Debits[i].Amount = mulSat(q.Debits[i].Amount, n)
		}
	}
	return q
}

// hasCost reports whether the part charges or refunds (applied whatever the
// decision, so never decided twice).
func (pt *part) hasCost() bool {
	for i := range pt.debits {
		if op := pt.debits[i].Op; op == cascade.Charge || op == cascade.Refund {
			return true
		}
	}
	return false
}

// compensation returns the part that gives back what an admitted part
// consumed, on the same shard and in the same units, or nil.
func (pt *part) compensation() *part {
	c := &part{kind: giveBackPart, b: pt.b, scale: max(pt.n, 1), of: pt, from: pt.from}
	for i, d := range pt.debits {
		if d.Op != cascade.Consume || !pt.dec.Statuses[i].OK || d.Amount <= 0 {
			continue
		}
		d.Op, d.Role = cascade.Refund, cascade.Advisory
		if pt.scale == 0 {
			d.Amount = mulSat(d.Amount, max(pt.n, 1))
		}
		c.debits = append(c.debits, d)
	}
	if len(c.debits) == 0 {
		return nil
	}
	c.choose(pt.shard)
	return c
}

// restored reports, in the plan's decision, what the limits of the part
// that pt (a compensation) gave back for hold once it landed.
func (pt *part) restored(dec *cascade.Decision) {
	if pt.err != nil || len(pt.dec.Statuses) == 0 {
		return
	}
	for j, d := range pt.of.debits {
		for k, cd := range pt.debits {
			if cd.Limit == d.Limit {
				st := &dec.Statuses[pt.of.idx[j]]
				st.Remaining, st.ResetAfter = pt.dec.Statuses[k].Remaining, pt.dec.Statuses[k].ResetAfter
			}
		}
	}
}

// lanes holds one queue per bucket item (shard) that has decisions waiting
// or in flight: each runs one conditional write at a time, carrying every
// decision that queued while the one before was in flight.
type lanes struct {
	mu sync.Mutex
	m  map[string]*lane
}

type lane struct {
	queue   []*part
	running bool
	last    time.Time // when its last write started: a hot lane is paced from it (paced)
}

// await queues pt in its item's lane and waits for the decision. A part
// still queued when ctx ends is withdrawn and refused as contended (its own
// Key was too busy); one already in a write waits for that write, whose
// outcome is what the table holds. A part that charges or refunds is never
// withdrawn, and is queued again when its item was too busy, for up to
// four budgets; but a give-back still queued when ctx ends is withdrawn, and
// a give-back or a repayment its item kept too busy is not queued again
// past ctx: it fails as contended, having written nothing, for its owner
// to try again. A sharded
// part refused with nothing to charge or refund tries up to two other
// shards.
func (s *Store) await(ctx context.Context, pt *part) {
	// A part with cost that its item kept too busy is queued again for up
	// to this long: a wait, on the runtime's clock like the deadlines of
	// the calls it bounds (see WithClock).
	costDeadline := time.Now().Add(4 * s.cfg.Timeout)
	for {
		if !s.enqueue(pt) {
			pt.err = errClosed
			return
		}
		select {
		case <-pt.done:
		case <-ctx.Done():
			// A part that charges or refunds reports cost already spent: it
			// stays queued rather than be dropped. A give-back is tried
			// again by its owner (compensate, retryGiveBacks).
			if pt.givesBack() && s.withdraw(pt) {
				pt.err = fmt.Errorf("dynamo: give back on %s: budget ended while queued: %w", pt.pk, errContended)
				return
			}
			if !pt.hasCost() && s.withdraw(pt) {
				pt.dec = contended(pt, cacher{s}.cachedImage(pt.pk), s.nowMs())
				s.obs.Contended(ContendedQueued)
				return
			}
			<-pt.done
		}
		if errors.Is(pt.err, errContended) {
			if time.Now().Before(costDeadline) && (pt.kind == decisionPart || ctx.Err() == nil) {
				var sp *shardPending
				switch {
				case errors.As(pt.err, &sp) && pt.kind == decisionPart:
					pt.choose(sp.pair)
				case sp != nil || errors.Is(pt.err, errShardGone):
					s.rehome(pt)
				default:
					pt.choose(pt.shard)
				}
				continue
			}
			s.obs.Contended(ContendedRaced)
			if pt.givesBack() {
				pt.err = fmt.Errorf("dynamo: give back on %s: bucket too busy: %w", pt.pk, errContended)
				return
			}
			pt.err, pt.dec = nil, contended(pt, cacher{s}.cachedImage(pt.pk), s.nowMs())
			return
		}
		if pt.ended(ctx) || !pt.mayTryAnotherShard() {
			return
		}
		pt.tried++
		pt.choose((pt.shard + 1 + rand.IntN(pt.n-1)) % pt.n)
	}
}

func (s *Store) enqueue(pt *part) bool {
	hot := cacher{s}.hot(pt.b.base)
	s.lanes.mu.Lock()
	defer s.lanes.mu.Unlock()
	if s.closed.Load() {
		return false
	}
	ln := s.lanes.m[pt.pk]
	if ln == nil {
		ln = &lane{}
		if hot {
			ln.last = time.Now() // a hot lane's first write gathers a pace's decisions too
		}
		s.lanes.m[pt.pk] = ln
	}
	ln.queue = append(ln.queue, pt)
	if !ln.running {
		ln.running = true
		s.wg.Add(1)
		go s.run(pt.pk, ln)
	}
	return true
}

// withdraw removes pt from its lane's queue unless a runner took it.
func (s *Store) withdraw(pt *part) bool {
	s.lanes.mu.Lock()
	defer s.lanes.mu.Unlock()
	if pt.taken {
		return false
	}
	if ln := s.lanes.m[pt.pk]; ln != nil {
		for i, q := range ln.queue {
			if q == pt {
				ln.queue = append(ln.queue[:i], ln.queue[i+1:]...)
				break
			}
		}
	}
	return true
}

// run decides the lane's queue, batch after batch, until it is empty.
func (s *Store) run(pk string, ln *lane) {
	defer s.wg.Done()
	for {
		if b, ok := (pacer{s}).laneBucket(ln); ok {
			pacer{s}.paced(ln, b)
		}
		s.lanes.mu.Lock()
		batch := ln.queue
		ln.queue = nil
		if len(batch) == 0 {
			ln.running = false
			delete(s.lanes.m, pk)
			s.lanes.mu.Unlock()
			return
		}
		for _, pt := range batch {
			pt.taken = true
		}
		s.lanes.mu.Unlock()
		ln.last = time.Now()
		b := batch[0].b
		hot := len(batch) > 1 && cacher{s}.shardCount(b.base) > 1
		if hot {
			cacher{s}.heat(b.base)
		}
		batchWriter{s}.runBatch(pk, batch, hot || cacher{s}.hot(b.base))
		for _, pt := range batch {
			close(pt.done)
		}
	}
}

// laneBucket returns the bucket of the first part queued on ln, if any.
func (s pacer) laneBucket(ln *lane) (bucket, bool) {
	s.lanes.mu.Lock()
	defer s.lanes.mu.Unlock()
	if len(ln.queue) == 0 {
		return bucket{}, false
	}
	return ln.queue[0].b, true
}

// contended is the refusal of a part that could not be decided in time
// because of its own key: every consume and charge refused (a charge that
// was not written did not land), retry after contendedRetry; statuses from
// the last image when there is one.
func contended(pt *part, img *item.Image, nowMs int64) cascade.Decision {
	dec := cascade.Busy(pt.debits, contendedRetry)
	for i, d := range pt.debits {
		if l, ok := img.Has(item.LimitPrefix(d.Limit)); ok {
			dec.Statuses[i].Remaining = d.Bucket.Tokens(stateOf(l), nowMs)
		}
	}
	return dec
}
