package memstore

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"math/bits"
	"runtime"
	"slices"
	"sync/atomic"
	"time"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// Defaults.
const (
	// DefaultMaxBuckets bounds the number of bucket limits held.
	DefaultMaxBuckets = 1_000_000
	// DefaultMaxBytes bounds the memory the bucket limits hold (1 GiB).
	DefaultMaxBytes = 1 << 30
	// DefaultSweepInterval is how often Run drops buckets that are full again.
	DefaultSweepInterval = 10 * time.Second
)

// Option configures a Store.
type Option func(*config)

type config struct {
	now           func() time.Time
	namespace     string
	shards        int
	maxBuckets    int
	maxBytes      int64
	sweepInterval time.Duration
}

// WithClock sets the store's time source (time.Now by default).
func WithClock(now func() time.Time) Option {
	return func(c *config) {
		if now != nil {
			c.now = now
		}
	}
}

// WithNamespace sets the deployment's namespace (NAMESPACE): the namespace
// of plan keys whose Namespace is empty, so that a key naming it and a key
// naming none are one bucket, as in the DynamoDB store. The store keeps one
// process's buckets, so it isolates nothing more than that.
func WithNamespace(ns string) Option {
	return func(c *config) { c.namespace = ns }
}

// WithShards sets the number of shards, rounded up to a power of two (at
// least 1). The default is the least power of two ≥ 4×GOMAXPROCS.
func WithShards(n int) Option {
	return func(c *config) { c.shards = n }
}

// WithMaxBuckets bounds the number of bucket limits held (default
// DefaultMaxBuckets); n ≤ 0 keeps the default. Each shard holds at most
// ⌈n/shards⌉.
func WithMaxBuckets(n int) Option {
	return func(c *config) {
		if n > 0 {
			c.maxBuckets = n
		}
	}
}

// WithMaxBytes bounds the memory the bucket limits hold, by Stats.Bytes'
// accounting (default DefaultMaxBytes); n ≤ 0 keeps the default. Each shard
// holds at most ⌊n/shards⌋ bytes, so a bucket whose key takes more than
// that is never stored.
func WithMaxBytes(n int64) Option {
	return func(c *config) {
		if n > 0 {
			c.maxBytes = n
		}
	}
}

// WithSweepInterval sets how often Run drops buckets that are full again
// (default DefaultSweepInterval); d ≤ 0 keeps the default.
func WithSweepInterval(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.sweepInterval = d
		}
	}
}

// Stats is a snapshot of a store's size and activity.
type Stats struct {
	// Buckets is the number of bucket limits held.
	Buckets int
	// Bytes is the memory they hold, by the store's accounting: key bytes
	// plus entryOverhead per bucket limit.
	Bytes int64
	// EvictedFull counts buckets dropped because they were full again (by
	// the sweeper, or to make room): no decision changes.
	EvictedFull uint64
	// EvictedNotFull counts buckets dropped to make room at the bound while
	// holding less than full (see doc.go).
	EvictedNotFull uint64
	// ForgivenMillitokens adds up what those buckets lacked of full when
	// they were dropped (debt included): the most their evictions can have
	// admitted beyond the limits, saturating.
	ForgivenMillitokens uint64
}

// Store is the embedded store. It is safe for concurrent use; create it with
// New.
type Store struct {
	now           func() time.Time
	namespace     string // keys naming it are stored naming none (see canonical)
	seed          maphash.Seed
	shards        []shard
	mask          uint64
	perShard      int
	perShardBytes int64
	sweepInterval time.Duration
	settled       []settled     // settlement IDs, by hash (settle.go)
	perSettled    int           // IDs each of settled remembers at most
	seq           atomic.Uint64 // last entry sequence number (the lock order)
	evictedFull   atomic.Uint64
	evictedOther  atomic.Uint64
	forgiven      atomic.Uint64
	// onEvict, when set (by tests), is told of each bucket evicted while
	// holding less than full, and whether it was forgotten after its plan
	// decided on it (no room was made for it) rather than before.
	onEvict func(k bucketKey, deficit uint64, after bool)
}

// New returns an empty store.
func New(opts ...Option) *Store {
	c := config{
		now:           time.Now,
		shards:        4 * runtime.GOMAXPROCS(0),
		maxBuckets:    DefaultMaxBuckets,
		maxBytes:      DefaultMaxBytes,
		sweepInterval: DefaultSweepInterval,
	}
	for _, o := range opts {
		o(&c)
	}
	n := 1
	if c.shards > 1 {
		n = 1 << bits.Len(uint(c.shards-1))
	}
	s := &Store{
		now:           c.now,
		namespace:     c.namespace,
		seed:          maphash.MakeSeed(),
		shards:        make([]shard, n),
		mask:          uint64(n - 1),
		perShard:      (c.maxBuckets + n - 1) / n,
		perShardBytes: c.maxBytes / int64(n),
		sweepInterval: c.sweepInterval,
		settled:       make([]settled, n),
		perSettled:    (MaxSettlements + n - 1) / n,
	}
	for i := range s.shards {
		s.shards[i].init()
		s.settled[i].ids = map[string]int64{}
	}
	return s
}

// inline is the plan size handled without heap allocations; plans larger
// than largePlan find repeated bucket limits with a map.
const (
	inline    = 8
	largePlan = 32
	// maxRetries bounds how often a plan starts again because a bucket it
	// looked up was dropped, or created by another plan, meanwhile.
	maxRetries = 64
	// busyRetry is the retry-after of a plan refused because its new
	// buckets raced with other plans maxRetries times.
	busyRetry = time.Millisecond
)

// ref is one distinct bucket limit of the plan being decided.
type ref struct {
	hash  uint64
	first int // index of the first debit naming it
	e     *entry
	limit tokenbucket.Limit // of the last debit naming it: what is stored
	// lowers: a debit may leave it less than full (a consume or charge of
	// more than nothing), so it is worth evicting another to store it.
	lowers bool
}

// Acquire decides p all-or-nothing at the store's current time and persists
// the result. It returns an error only when the store cannot decide: ctx is
// already done, or a debit is invalid (wrapping cascade.ErrInvalid: its
// limit, or a key larger than a shard's byte bound). A store at its bound
// still decides: it evicts to make room (see doc.go).
//
// The work is linear in the plan's size (with a sort of its distinct
// buckets): each distinct bucket limit is looked up once, holding its shard's
// lock for that lookup only; the plan then holds the locks of its own
// buckets, and of no other, while cascade.Decide runs.
func (s *Store) Acquire(ctx context.Context, p *cascade.Plan) (cascade.Decision, error) {
	if err := ctx.Err(); err != nil {
		return cascade.Decision{}, fmt.Errorf("memstore: acquire: %w", err)
	}
	if p == nil {
		return cascade.Decision{}, errors.New("memstore: acquire: nil plan")
	}
	return s.apply(p, false)
}

// apply decides p as Acquire describes. A plan whose new buckets raced
// with other plans maxRetries times is refused (cascade.Busy), unless it
// must be applied (a settlement): then its last decision stands, on those
// buckets as on buckets its shard had no room for (forgotten at once, an
// eviction).
func (s *Store) apply(p *cascade.Plan, must bool) (cascade.Decision, error) {
	p = s.canonical(p)
	n := len(p.Debits)
	for i := range p.Debits {
		if err := p.Debits[i].Bucket.Validate(); err != nil {
			return cascade.Decision{}, fmt.Errorf("memstore: debit %d of %s: %w: %w", i, p.Debits[i].Limit, cascade.ErrInvalid, err)
		}
	}
	var (
		slotArr  [inline]int
		levelArr [inline]tokenbucket.Level
		refArr   [inline]ref
		orderArr [inline]int
	)
	slot, levels, refs, order := slotArr[:0], levelArr[:0], refArr[:0], orderArr[:0]
	if n > inline {
		slot = make([]int, 0, n)
		refs = make([]ref, 0, n)
	}
	slot, refs, err := s.distinct(p, slot, refs)
	if err != nil {
		return cascade.Decision{}, err
	}
	if len(refs) > inline {
		levels = make([]tokenbucket.Level, 0, len(refs))
		order = make([]int, 0, len(refs))
	}

	for attempt := 1; attempt <= maxRetries; attempt++ {
		order = s.lockAll(p, refs, order[:0])
		nowMs := s.now().UnixMilli()
		levels = levels[:0]
		for j := range refs {
			levels = append(levels, refs[j].e.level(refs[j].limit, nowMs))
		}
		dec := cascade.Decide(p, slot, levels, nowMs)
		if (attempt < maxRetries || !must) && s.raced(refs) {
			s.unlockAll(refs, order)
			for j := range refs {
				if refs[j].e.transient {
					refs[j].e = nil
				}
			}
			continue
		}
		s.keep(refs, levels, nowMs)
		s.unlockAll(refs, order)
		return dec, nil
	}
	// Contention, not an outage: refused with a short retry-after, never an
	// error that ON_UNAVAILABLE=allow would admit.
	return cascade.Busy(p.Debits, busyRetry), nil
}

// distinct names the distinct bucket limits of p: it appends one ref to
// refs for each, and to slot, for each debit, the index in refs of its
// bucket. Small plans compare with the buckets seen so far; large ones use
// a map. A key larger than a shard's byte bound is an error (wrapping
// cascade.ErrInvalid).
func (s *Store) distinct(p *cascade.Plan, slot []int, refs []ref) ([]int, []ref, error) {
	var seen map[bucketKey]int
	if len(p.Debits) > largePlan {
		seen = make(map[bucketKey]int, len(p.Debits))
	}
	for i := range p.Debits {
		d := &p.Debits[i]
		h := s.hash(d)
		j := 0
		if seen != nil {
			k := bucketKey{d.Key, d.Limit}
			var ok bool
			if j, ok = seen[k]; !ok {
				j = len(refs)
				seen[k] = j
			}
		} else {
			for ; j < len(refs); j++ {
				if f := &p.Debits[refs[j].first]; refs[j].hash == h && f.Key == d.Key && f.Limit == d.Limit {
					break
				}
			}
		}
		if j == len(refs) {
			if size := entryBytes(&bucketKey{d.Key, d.Limit}); size > s.perShardBytes {
				return nil, nil, fmt.Errorf("memstore: debit %d of %s: key of %d bytes, more than a shard holds (%d): %w", i, d.Limit, size, s.perShardBytes, cascade.ErrInvalid)
			}
			refs = append(refs, ref{hash: h, first: i})
		}
		refs[j].limit = d.Bucket
		refs[j].lowers = refs[j].lowers || (d.Op == cascade.Consume || d.Op == cascade.Charge) && d.Amount > 0
		slot = append(slot, j)
	}
	return slot, refs, nil
}

// raced reports whether a bucket its shard made no room for, and that was
// decided on as new, was created by another plan meanwhile: the plan must
// be decided again.
func (s *Store) raced(refs []ref) bool {
	for j := range refs {
		if refs[j].e.transient && s.exists(&refs[j]) {
			return true
		}
	}
	return false
}

// keep stores the levels a decision left in the entries of refs, whose
// locks the plan holds: an entry that changed, a stored one whose limit
// changed, a new one left less than full; a transient entry (its shard made
// no room) is forgotten at once, as an eviction when the plan lowered it.
func (s *Store) keep(refs []ref, levels []tokenbucket.Level, nowMs int64) {
	for j := range refs {
		r := &refs[j]
		v := &levels[j]
		st := v.State()
		if r.e.transient {
			if !isFull(r.limit, st, nowMs) {
				s.evicted(&r.e.key, r.limit, st, nowMs, true)
			}
			continue
		}
		if r.e.stored && r.e.used < maxUsed {
			r.e.used++
		}
		switch {
		case !r.e.stored && isFull(r.limit, st, nowMs):
			// Exactly a new bucket: nothing to remember (unlockAll drops it).
		case !r.e.stored || v.Changed() || r.e.limit != r.limit:
			r.e.state, r.e.limit, r.e.stored = st, r.limit, true
		}
	}
}

// lockAll looks up (or creates) the entries of refs that have none, then
// locks them in sequence order, starting again for any entry dropped before
// its lock was taken. It returns the lock order (indexes into refs). No
// shard lock is held on return.
func (s *Store) lockAll(p *cascade.Plan, refs []ref, order []int) []int {
	for {
		for j := range refs {
			if refs[j].e == nil {
				refs[j].e = s.get(&refs[j], &p.Debits[refs[j].first])
			}
		}
		order = order[:0]
		for j := range refs {
			if !refs[j].e.transient {
				order = append(order, j)
			}
		}
		slices.SortFunc(order, func(a, b int) int {
			sa, sb := refs[a].e.seq, refs[b].e.seq
			switch {
			case sa < sb:
				return -1
			case sa > sb:
				return 1
			}
			return 0
		})
		dead := false
		for _, j := range order {
			refs[j].e.mu.Lock()
			dead = dead || refs[j].e.dead
		}
		if !dead {
			return order
		}
		for _, j := range order {
			e := refs[j].e
			if e.dead {
				refs[j].e = nil
			}
			e.mu.Unlock()
		}
	}
}

// unlockAll drops the entries of refs that were created for this plan and
// hold nothing (a bucket still full), then unlocks them.
func (s *Store) unlockAll(refs []ref, order []int) {
	for _, j := range order {
		e := refs[j].e
		if !e.stored && !e.dead {
			sh := &s.shards[refs[j].hash&s.mask]
			sh.mu.Lock()
			sh.remove(e)
			sh.mu.Unlock()
		}
		e.mu.Unlock()
	}
}

// get returns r's entry, creating it, after making room if its shard is at
// its bound. It returns a transient entry, that no other plan sees, if no
// room can be made (every bucket the eviction hand reached is held by a
// plan), or none but by evicting a bucket holding less than full while the
// plan cannot lower r's (a check: r stays full, so it is not kept anyway).
func (s *Store) get(r *ref, d *cascade.Debit) *entry {
	sh := &s.shards[r.hash&s.mask]
	k := bucketKey{d.Key, d.Limit}
	size := entryBytes(&k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.m[k]; e != nil {
		return e
	}
	if !s.room(sh, size, r.lowers) {
		return &entry{key: k, size: size, transient: true}
	}
	e := &entry{key: cloneKey(d.Key, d.Limit), size: size, seq: s.seq.Add(1)}
	sh.insert(e)
	return e
}

// exists reports whether r's shard holds r's bucket limit.
func (s *Store) exists(r *ref) bool {
	sh := &s.shards[r.hash&s.mask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	_, ok := sh.m[r.e.key]
	return ok
}

// evictScan is how many entries the eviction hand passes at most to make
// room for one new entry: the cost of an insert at the bound is O(1).
const evictScan = 8

// maxUsed is how many passes of the eviction hand a bucket survives without
// being decided on, once it was decided on that often: a bucket in steady
// use outlives a flood of buckets used once.
const maxUsed = 3

// victim is an entry the eviction hand passed that may be dropped to make
// room, with the instant it is full again.
type victim struct {
	e      *entry
	fullAt int64
	used   bool
}

// room reports whether sh can take an entry of size bytes, making room if
// it must. The eviction hand passes up to evictScan entries: it drops those
// that are full again (nothing is lost) and skips those in use by a plan.
// If evict is set, it counts down the used count of the others, and if
// dropping the full ones was not room enough, it drops, of the entries it
// passed, first those whose count was zero and then the others, each group
// nearest to full first (least time-to-full): the eviction forgives the
// least. sh.mu must be held.
func (s *Store) room(sh *shard, size int64, evict bool) bool {
	fits := func() bool { return sh.n < s.perShard && sh.bytes+size <= s.perShardBytes }
	if fits() {
		return true
	}
	nowMs := s.now().UnixMilli()
	var arr [evictScan]victim
	vs := arr[:0]
	for range min(evictScan, sh.n) { // each entry once
		e := sh.advance()
		if e == nil || fits() {
			break
		}
		if !e.mu.TryLock() {
			continue // in use
		}
		switch {
		case !e.stored:
			// Created for a plan that has not locked it yet.
		case isFull(e.limit, e.state, nowMs):
			s.drop(sh, e, nowMs)
		case evict:
			vs = append(vs, victim{e: e, fullAt: e.limit.FullAt(e.state), used: e.used > 0})
			if e.used > 0 {
				e.used--
			}
		}
		e.mu.Unlock()
	}
	if fits() || len(vs) == 0 {
		return fits()
	}
	slices.SortFunc(vs, func(a, b victim) int {
		switch {
		case a.used != b.used:
			if a.used {
				return 1
			}
			return -1
		case a.fullAt < b.fullAt:
			return -1
		case a.fullAt > b.fullAt:
			return 1
		}
		return 0
	})
	for _, v := range vs {
		if fits() {
			break
		}
		if !v.e.mu.TryLock() {
			continue
		}
		// A plan may have decided on it since: it is still a bucket, in
		// its shard, that the plan wrote back.
		if !v.e.dead && v.e.stored && (v.used || v.e.used == 0) {
			s.drop(sh, v.e, nowMs)
		}
		v.e.mu.Unlock()
	}
	return fits()
}

// drop removes e from sh and counts its eviction at nowMs. sh.mu and e.mu
// must be held.
func (s *Store) drop(sh *shard, e *entry, nowMs int64) {
	sh.remove(e)
	s.evicted(&e.key, e.limit, e.state, nowMs, false)
}

// evicted counts the eviction at nowMs of bucket k of limit l at level st:
// full, or holding less than full, its deficit forgiven. after tells that
// it is forgotten after its plan decided on it.
func (s *Store) evicted(k *bucketKey, l tokenbucket.Limit, st tokenbucket.State, nowMs int64, after bool) {
	if isFull(l, st, nowMs) {
		s.evictedFull.Add(1)
		return
	}
	// Capacity minus what it holds, which may be negative (debt): in
	// two's complement the difference is exact below 2⁶⁴.
	deficit := uint64(l.Capacity) - uint64(l.Tokens(st, nowMs))
	s.evictedOther.Add(1)
	for {
		old := s.forgiven.Load()
		sum := old + deficit
		if sum < old {
			sum = math.MaxUint64
		}
		if s.forgiven.CompareAndSwap(old, sum) {
			break
		}
	}
	if s.onEvict != nil {
		s.onEvict(*k, deficit, after)
	}
}

// canonical returns p, or, when a debit names the store's namespace, a copy
// in which it names none: a key naming the deployment's namespace and a key
// naming none are one bucket, stored under the empty namespace. Plans whose
// keys name no namespace (the service's, for files without `namespace:`)
// are not copied.
func (s *Store) canonical(p *cascade.Plan) *cascade.Plan {
	if s.namespace == "" {
		return p
	}
	for i := range p.Debits {
		if p.Debits[i].Key.Namespace != s.namespace {
			continue
		}
		q := &cascade.Plan{Debits: slices.Clone(p.Debits)}
		for j := i; j < len(q.Debits); j++ {
			if q.Debits[j].Key.Namespace == s.namespace {
				q.Debits[j].Key.Namespace = ""
			}
		}
		return q
	}
	return p
}

// hash spreads bucket limits over shards. Equal keys hash equally; the
// per-field hashes are combined so that moving bytes between fields changes
// the hash.
func (s *Store) hash(d *cascade.Debit) uint64 {
	const m = 0x9e3779b97f4a7c15
	h := maphash.String(s.seed, d.Key.Namespace)
	h = (h ^ maphash.String(s.seed, d.Key.Entity)) * m
	h = (h ^ maphash.String(s.seed, d.Key.Resource)) * m
	h = (h ^ maphash.String(s.seed, d.Limit)) * m
	return h ^ h>>29
}

// isFull reports whether a bucket of limit l at level st is full at nowMs:
// it is then exactly a new bucket (Limit.Full(nowMs)), and dropping it
// changes no decision at nowMs or later.
func isFull(l tokenbucket.Limit, st tokenbucket.State, nowMs int64) bool {
	return l.FullAt(st) <= nowMs
}

// Run sweeps the store every sweep interval, dropping the buckets that are
// full again, until ctx ends; then it returns nil. It starts no other
// goroutine.
func (s *Store) Run(ctx context.Context) error {
	t := time.NewTicker(s.sweepInterval)
	defer t.Stop()
	var buf []*entry
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			buf = s.sweep(buf)
		}
	}
}

// sweepBatch is how many entries the sweeper examines per hold of a shard
// lock.
const sweepBatch = 256

// sweep drops every bucket that is full now, a batch at a time, so that no
// shard lock is held for long. It returns buf for reuse.
func (s *Store) sweep(buf []*entry) []*entry {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		buf = buf[:0]
		for e := sh.ring.next; e != &sh.ring; e = e.next {
			buf = append(buf, e)
		}
		sh.mu.Unlock()
		for start := 0; start < len(buf); start += sweepBatch {
			batch := buf[start:min(start+sweepBatch, len(buf))]
			sh.mu.Lock()
			nowMs := s.now().UnixMilli()
			for _, e := range batch {
				if !e.mu.TryLock() {
					continue // in use
				}
				if !e.dead && e.stored && isFull(e.limit, e.state, nowMs) {
					s.drop(sh, e, nowMs)
				}
				e.mu.Unlock()
			}
			sh.mu.Unlock()
		}
		clear(buf) // let dropped entries go
	}
	return buf[:0]
}

// Stats returns the store's size and counters. It locks each shard briefly.
func (s *Store) Stats() Stats {
	st := Stats{EvictedFull: s.evictedFull.Load(), EvictedNotFull: s.evictedOther.Load(), ForgivenMillitokens: s.forgiven.Load()}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		st.Buckets += sh.n
		st.Bytes += sh.bytes
		sh.mu.Unlock()
	}
	return st
}
