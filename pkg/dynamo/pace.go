package dynamo

import (
	"time"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo/item"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// A hot sharded bucket: a bucket of more than one shard whose lanes carry
// more than one decision a write. Every replica writing every shard as
// fast as DynamoDB answers asks more writes of the shards' partitions than
// they take (replicas × shards ÷ latency), and replicas writing one shard
// at once lose races to each other, each race a write billed. So, on a hot
// bucket only, a replica:
//
//   - paces each shard's writes: a lane starts a write at most once every
//     Config.Timeout/paceDivisor, gathering the decisions that arrive
//     meanwhile into it, when its writes find other replicas' decisions
//     on the shard (paced, crowded);
//   - writes one shard of its own, its home, and does not try other
//     shards after a refusal (home). When its heartbeats (fleet.go) count
//     at least homeWriters times as many live replicas as the bucket has
//     shards, and it asks enough of the bucket that the shards' fewest
//     writers, asking as it does, ask homeDemand times a shard's share
//     (demand.Asks), its home is its rank among them modulo the shards: every
//     shard has writers, the same ones, whose images of it stay fresh and
//     who learn each other's rates, and every shard runs dry. Otherwise
//     (a smaller fleet, a bucket asked about its limit, or no heartbeats)
//     its home moves on every homeCycle/n, so that it has been every
//     shard within homeCycle;
//   - leaves to the other writers of the shard what they have likely
//     taken since its last image: it claims only what that image holds
//     less what the others took over as long, at the rate they took it
//     at, and refuses the rest without writing (claim). Whatever it
//     admits, it admits with a conditional write, as always; a refusal
//     the image stands for is a refusal, the others are contended.
//
// A bucket that is not hot (one shard, or one decision a write) is written
// as before: at once, on a shard picked at random.
const (
	// paceDivisor: a hot lane writes at most once every Timeout/paceDivisor.
	paceDivisor = 3
	// homeCycle is how long a replica takes to move its home over every
	// shard of a hot bucket: well within the second of refill that a
	// bucket's burst usually holds, so a shard no replica's home is on for
	// a while keeps its tokens until one comes.
	homeCycle = 500 * time.Millisecond
	// heatWindow: a bucket stays hot this long after a write that carried
	// more than one decision.
	heatWindow = time.Second
	// staleClaims: a hot lane reads its shard again rather than decide on
	// an image older than this many paces (its home was elsewhere).
	staleClaims = 4
	// claimShare bounds what a claim leaves to the others: at most this
	// share, in tenths, of what the image holds.
	claimShare = 9
	// homeWriters: a replica's home shard is fixed by its rank when the
	// live replicas are at least this many times the shards. With fewer
	// (10 replicas on 8 shards: one writer on most), fixed homes left
	// tenants of the zipf scenario under 0.97 of their limits (0.952-0.963).
	homeWriters = 2
	// homeDemand: and when the shards' fewest writers ask at least this
	// many times a shard's share of the limit, as this replica asks
	// (demand.Asks). Every shard then runs dry. With less, a shard of fewer
	// writers keeps tokens that nobody asks of it while the others refuse:
	// a tenant of zipf asked 1.12 times its limit over 10 replicas, on 4
	// shards with 2 or 3 writers each, got 0.885 of it.
	homeDemand = 1.25
)

// others is what the other writers of one shard took of each of its
// limits, by attribute prefix: the level's rise per millisecond, as this
// replica's writes found it.
type others map[string]float64

// pace is how long a hot lane waits between the starts of its writes.
func (s pacer) pace() time.Duration { return s.cfg.Timeout / paceDivisor }

// hot reports whether the bucket base wrote a batch of more than one
// decision within heatWindow.
func (s cacher) hot(base string) bool { return s.within(s.heats, base) }

// crowded reports whether this replica's writes on the bucket base found
// other writers' decisions on one of its shards within heatWindow (seen).
// Pacing spares a shard's partition the writes of many replicas and their
// races; a replica alone on a bucket has neither, and writes as fast as
// DynamoDB answers, one write in flight, as on a bucket that is not hot.
// (A pace is a third of the budget: with BACKEND_TIMEOUT=1s a lone
// replica's decisions would wait a third of a second for it.)
func (s cacher) crowded(base string) bool { return s.within(s.shared, base) }

// within reports whether marks (heats or shared) holds base until a time
// still to come.
func (s cacher) within(marks *lru[int64], base string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	until, ok := marks.peek(base)
	return ok && s.nowMs() < until
}

// markLocked marks base in marks (heats or shared) for heatWindow; s.mu
// is held.
func (s cacher) markLocked(marks *lru[int64], base string) {
	marks.add(base, s.nowMs()+heatWindow.Milliseconds())
}

// heat marks base hot for heatWindow.
func (s cacher) heat(base string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.markLocked(s.heats, base)
}

// shardFor returns the shard a decision on b goes to: this replica's home
// shard when b is hot, else one at random.
func (s pacer) shardFor(b bucket) int { return s.shardAsking(b, nil) }

// shardAsking is shardFor for a decision that asks debits of b: when b is
// hot and sharded they count first in what this replica asks of it
// (demand.Asks), which decides whether its home is fixed.
func (s pacer) shardAsking(b bucket, debits []cascade.Debit) int {
	n := cacher(s).shardCount(b.base)
	if n <= 1 || !cacher(s).hot(b.base) {
		return s.pickShard(n)
	}
	now := s.nowMs()
	var asked float64
	if len(debits) > 0 {
		asked = s.asks.Add(b.base, debits, now)
	} else {
		asked = s.asks.Ratio(b.base, now)
	}
	if p := s.place.Load(); p != nil && p.live >= homeWriters*n && now < p.until &&
		asked*float64(n*(p.live/n)) >= homeDemand {
		// The fleet covers every shard twice, and asks enough that every
		// shard runs dry: each keeps the same writers, a live/n of the
		// fleet, whose images and rates stay fresh.
		return p.rank % n
	}
	step := homeCycle.Milliseconds() / int64(n)
	return int((s.home + uint64(now/max(step, 1))) % uint64(n))
}

// paced waits, before a lane's next batch, until its last write started a
// pace ago when the lane's bucket is hot and other replicas write it too
// (crowded); it returns at once when the store closes.
func (s pacer) paced(ln *lane, b bucket) {
	if ln.last.IsZero() || cacher(s).shardCount(b.base) <= 1 || !cacher(s).hot(b.base) || !cacher(s).crowded(b.base) {
		return
	}
	if d := time.Until(ln.last.Add(s.pace())); d > 0 {
		Sleep(s.life, d)
	}
}

// claim splits a hot batch, to be decided on img at now, into the parts to
// write and the parts decided here without a write (aside), whose
// decisions it sets: the decisions that the image, aged by what the other
// writers of the shard likely took since (aged), does not admit. Of those,
// a refusal that the image itself stands for (read during this batch, or
// within maxRejection with the rejection cache on: levels only rise
// between refunds) is a refusal; the others are contended (raced). Parts
// that charge, refund or repay are always written.
func (s batchWriter) claim(pk string, batch []*part, img *item.Image, read bool, now int64) (write, aside []*part) {
	aged := s.aged(pk, img, now)
	if aged == img {
		return batch, nil
	}
	ja := judge(batch, aged, now)
	keep := make([]bool, len(batch))
	claimed := false
	for i, pt := range batch {
		keep[i] = pt.kind != decisionPart || pt.hasCost() || ja.decs[i].Admitted
		claimed = claimed || pt.kind == decisionPart && ja.decs[i].Admitted
	}
	if !claimed {
		// The claim covers no decision: the first is written anyway, so
		// that a bucket holding little is not left to the others for good
		// and this replica's rates are learned again.
		for i := range batch {
			if !keep[i] {
				keep[i] = true
				break
			}
		}
	}
	for i, pt := range batch {
		if keep[i] {
			write = append(write, pt)
		} else {
			aside = append(aside, pt)
		}
	}
	if len(aside) == 0 {
		return batch, nil
	}
	all := append(append(make([]*part, 0, len(batch)), write...), aside...)
	jr := judge(all, img, now)
	stands := read || s.cfg.RejectionCacheSize > 0 && now-img.AtMs <= maxRejection.Milliseconds()
	for k, pt := range aside {
		i := len(write) + k
		if stands && !jr.decs[i].Admitted {
			pt.dec, pt.n, pt.start, pt.dup = jr.decs[i], jr.n, &jr.starts[i], false
			cacher(s).rememberRefusal(pt, now)
			continue
		}
		pt.dec, pt.n, pt.start = contended(pt, img, now), jr.n, nil
		s.obs.Contended(ContendedRaced)
	}
	return write, aside
}

// aged returns img with each level raised by what the other writers of pk
// likely took since this replica got it (the rate they took it at, as its
// writes found, over the image's age) and by half of what is left, a
// margin for the writes that land meanwhile: others take a shard's tokens
// a write at a time, not evenly, and a claim that misses costs a write.
// At most claimShare tenths of what the level holds are set aside, so a
// replica keeps claiming, and learning, however much the others took. img
// itself when that is nothing.
func (s batchWriter) aged(pk string, img *item.Image, now int64) *item.Image {
	age := max(now-img.AtMs, 0)
	if !img.Exists {
		return img
	}
	s.mu.Lock()
	o, _ := s.otherRates.peek(pk)
	var rates others
	if len(o) > 0 {
		rates = make(others, len(o))
		for p, r := range o {
			rates[p] = r
		}
	}
	s.mu.Unlock()
	var out *item.Image
	for p, l := range img.Limits {
		r := rates[p]
		if r <= 0 || l.Shape.Validate() != nil {
			continue
		}
		room, ok := int64Of(l.Shape.Empty(now).X.Sub(tokenbucket.Max(l.Level, l.Shape.Full(now).X)))
		if !ok || room <= 0 {
			continue
		}
		took := min(int64(r*float64(age)), room)
		eps := min(took+(room-took)/2, room/10*claimShare)
		if eps <= 0 {
			continue
		}
		if out == nil {
			cp := *img
			cp.Limits = make(map[string]item.LimitImage, len(img.Limits))
			for q, m := range img.Limits {
				cp.Limits[q] = m
			}
			out = &cp
		}
		l.Level = l.Level.Add(tokenbucket.I128(eps))
		out.Limits[p] = l
	}
	if out == nil {
		return img
	}
	return out
}

// tookOthers learns, from found (the item as this replica's write found
// it, or as DynamoDB returned it when the write's condition failed), how
// fast the other writers of pk raised each level that j decided on img:
// the rise between the two, less nothing of this replica's (found is
// before its write), over the time between. A rise marks the bucket b
// crowded for heatWindow.
func (s batchWriter) tookOthers(b bucket, pk string, img, found *item.Image, j *judgement) {
	dt := s.nowMs() - img.AtMs
	if dt <= 0 || found == nil || !found.Exists || !img.Exists {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.otherRates.peek(pk)
	if !ok {
		o = others{}
		s.otherRates.add(pk, o)
	}
	rose := false
	for k, p := range j.prefixes {
		was, ok1 := img.Has(p)
		is, ok2 := found.Has(p)
		if j.absent[k] || !ok1 || !ok2 {
			continue
		}
		rise, ok := int64Of(is.Level.Sub(was.Level))
		if !ok {
			continue
		}
		rose = rose || rise > 0
		r := float64(max(rise, 0)) / float64(dt)
		if prev, seen := o[p]; seen {
			r = (prev + r) / 2
		}
		o[p] = r
	}
	if rose {
		cacher(s).markLocked(s.shared, b.base)
	}
}

// sawOthers marks the bucket b crowded for heatWindow when a level of the
// shard rose between old, this replica's last image of it (after its own
// writes), and fresh, read from DynamoDB since: another replica's
// decisions. A replica whose home moves onto a shard reads it again, its
// image a few paces old, and learns there that it shares the bucket.
func (s batchWriter) sawOthers(b bucket, old, fresh *item.Image) {
	if old == nil || fresh == nil || !old.Exists || !fresh.Exists {
		return
	}
	for p, was := range old.Limits {
		if is, ok := fresh.Limits[p]; ok && was.Level.Less(is.Level) {
			s.mu.Lock()
			cacher(s).markLocked(s.shared, b.base)
			s.mu.Unlock()
			return
		}
	}
}

// int64Of returns a as an int64 when it fits.
func int64Of(a tokenbucket.Int128) (int64, bool) {
	switch {
	case a.Hi == 0 && a.Lo < 1<<63:
		return int64(a.Lo), true
	case a.Hi == -1 && a.Lo >= 1<<63:
		return int64(a.Lo), true
	}
	return 0, false
}

// pacer paces the writes of hot buckets and picks their home shards (pace.go).
type pacer struct{ *Store }
