package memstore

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math/bits"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// ErrFull is returned by Acquire when a plan needs a new bucket in a shard
// that is at its bound and holds no bucket that could be dropped.
var ErrFull = errors.New("memstore: bucket limit reached")

// Defaults.
const (
	// DefaultMaxBuckets bounds the number of bucket limits held.
	DefaultMaxBuckets = 1_000_000
	// DefaultSweepInterval is how often Run drops buckets that are full again.
	DefaultSweepInterval = 10 * time.Second
)

// entryOverhead estimates the bytes one bucket limit costs besides its key
// strings: the map slot (four string headers, a pointer, control bytes and
// load-factor slack) and the entry allocation (state and limit).
const entryOverhead = 4*16 + 8 + 16 + 48

// inline is the plan size handled without heap allocations; plans larger
// than largePlan find repeated bucket limits with a map.
const (
	inline    = 8
	largePlan = 32
)

// Option configures a Store.
type Option func(*config)

type config struct {
	now           func() time.Time
	shards        int
	maxBuckets    int
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
	// Bytes estimates the memory they hold.
	Bytes int64
	// Evictions counts buckets dropped because they were full again.
	Evictions uint64
	// Rejected counts plans refused with ErrFull.
	Rejected uint64
}

// Store is the embedded store. It is safe for concurrent use; create it with
// New.
type Store struct {
	now           func() time.Time
	seed          maphash.Seed
	shards        []shard
	mask          uint64
	perShard      int
	sweepInterval time.Duration
	evictions     atomic.Uint64
	rejected      atomic.Uint64
}

type bucketKey struct {
	key   cascade.Key
	limit string
}

type entry struct {
	state tokenbucket.State
	limit tokenbucket.Limit
}

// shard is one lock and the buckets behind it. Fields other than mu are
// guarded by mu.
type shard struct {
	mu    sync.Mutex
	m     map[bucketKey]*entry
	bytes int64
	// futileMs is the millisecond of the last at-bound scan that found
	// nothing to drop, +1 (0: none); no rescan happens within it.
	futileMs int64
	_        [64]byte // keep neighbouring shards' locks off one cache line
}

// New returns an empty store.
func New(opts ...Option) *Store {
	c := config{
		now:           time.Now,
		shards:        4 * runtime.GOMAXPROCS(0),
		maxBuckets:    DefaultMaxBuckets,
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
		seed:          maphash.MakeSeed(),
		shards:        make([]shard, n),
		mask:          uint64(n - 1),
		perShard:      (c.maxBuckets + n - 1) / n,
		sweepInterval: c.sweepInterval,
	}
	for i := range s.shards {
		s.shards[i].m = make(map[bucketKey]*entry)
	}
	return s
}

// ref is one distinct bucket limit of the plan being decided.
type ref struct {
	hash  uint64
	first int // index of the first debit naming it
	e     *entry
	limit tokenbucket.Limit // of the last debit naming it: what is stored
}

// Acquire decides p all-or-nothing at the store's current time and persists
// the result. It returns an error only when the store cannot decide: ctx is
// already done, a debit's limit is invalid, or ErrFull.
func (s *Store) Acquire(ctx context.Context, p *cascade.Plan) (cascade.Decision, error) {
	if err := ctx.Err(); err != nil {
		return cascade.Decision{}, fmt.Errorf("memstore: acquire: %w", err)
	}
	if p == nil {
		return cascade.Decision{}, errors.New("memstore: acquire: nil plan")
	}
	n := len(p.Debits)
	for i := range p.Debits {
		if l := &p.Debits[i].Bucket; l.Capacity < 1 || l.RefillAmount < 1 || l.RefillPeriod < time.Millisecond {
			return cascade.Decision{}, fmt.Errorf("memstore: debit %d of %s: invalid limit %+v", i, p.Debits[i].Limit, *l)
		}
	}
	var (
		slotArr  [inline]int
		levelArr [inline]tokenbucket.Level
		refArr   [inline]ref
		lockArr  [inline]int
	)
	slot, levels, refs, locks := slotArr[:0], levelArr[:0], refArr[:0], lockArr[:0]
	if n > inline {
		slot = make([]int, 0, n)
		levels = make([]tokenbucket.Level, 0, n)
		refs = make([]ref, 0, n)
		locks = make([]int, 0, n)
	}

	// Name the distinct bucket limits and the shards they live in. Small
	// plans compare with the buckets seen so far; large ones use a map.
	var seen map[bucketKey]int
	if n > largePlan {
		seen = make(map[bucketKey]int, n)
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
			refs = append(refs, ref{hash: h, first: i})
			locks = insertSorted(locks, int(h&s.mask))
		}
		refs[j].limit = d.Bucket
		slot = append(slot, j)
	}

	for _, si := range locks {
		s.shards[si].mu.Lock()
	}
	defer s.unlock(locks)

	nowMs := s.now().UnixMilli()
	for j := range refs {
		r := &refs[j]
		f := &p.Debits[r.first]
		r.e = s.shards[r.hash&s.mask].m[bucketKey{f.Key, f.Limit}]
		switch {
		case r.e == nil:
			levels = append(levels, tokenbucket.New(r.limit.Full(nowMs)))
		case r.e.limit != r.limit:
			levels = append(levels, tokenbucket.New(restate(r.e.state, r.e.limit, r.limit, nowMs)))
		default:
			levels = append(levels, tokenbucket.Stored(r.e.state))
		}
	}
	dec := cascade.Decide(p, slot, levels, nowMs)

	// Make room for the new buckets that hold something, or refuse to decide.
	for _, si := range locks {
		need := 0
		for j := range refs {
			if r := &refs[j]; r.e == nil && int(r.hash&s.mask) == si && !full(r.limit, levels[j].State(), nowMs) {
				need++
			}
		}
		if need > 0 && !s.makeRoom(&s.shards[si], need, nowMs, refs) {
			s.rejected.Add(1)
			return cascade.Decision{}, ErrFull
		}
	}
	for j := range refs {
		r := &refs[j]
		if r.e != nil {
			if levels[j].Changed() {
				r.e.state, r.e.limit = levels[j].State(), r.limit
			}
			continue
		}
		if full(r.limit, levels[j].State(), nowMs) {
			continue // exactly a new bucket: nothing to remember
		}
		f := &p.Debits[r.first]
		k := cloneKey(f.Key, f.Limit)
		sh := &s.shards[r.hash&s.mask]
		sh.m[k] = &entry{state: levels[j].State(), limit: r.limit}
		sh.bytes += entryBytes(&k)
	}
	return dec, nil
}

func (s *Store) unlock(locks []int) {
	for _, si := range locks {
		s.shards[si].mu.Unlock()
	}
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

// insertSorted adds v to the ascending list xs unless present.
func insertSorted(xs []int, v int) []int {
	i := 0
	for i < len(xs) && xs[i] < v {
		i++
	}
	if i < len(xs) && xs[i] == v {
		return xs
	}
	xs = append(xs, 0)
	copy(xs[i+1:], xs[i:])
	xs[i] = v
	return xs
}

// makeRoom ensures sh can take need more buckets, dropping its full buckets
// (other than those of the plan being decided) if it is at its bound.
// sh.mu must be held.
func (s *Store) makeRoom(sh *shard, need int, nowMs int64, refs []ref) bool {
	if len(sh.m)+need <= s.perShard {
		return true
	}
	if sh.futileMs == nowMs+1 {
		return false
	}
	for k, e := range sh.m {
		if !isFull(e, nowMs) || inPlan(e, refs) {
			continue
		}
		delete(sh.m, k)
		sh.bytes -= entryBytes(&k)
		s.evictions.Add(1)
	}
	if len(sh.m)+need <= s.perShard {
		return true
	}
	sh.futileMs = nowMs + 1
	return false
}

func inPlan(e *entry, refs []ref) bool {
	for i := range refs {
		if refs[i].e == e {
			return true
		}
	}
	return false
}

// isFull reports whether the bucket would be full at nowMs with its clock
// not ahead of nowMs: it is then exactly a new bucket (Limit.Full(nowMs)),
// and dropping it changes no decision. A full bucket whose last refill is
// later than nowMs (the clock went backwards) is kept until time catches up.
func isFull(e *entry, nowMs int64) bool { return full(e.limit, e.state, nowMs) }

// full reports whether a bucket of limit l at level s is full at nowMs.
func full(l tokenbucket.Limit, s tokenbucket.State, nowMs int64) bool { return l.FullAt(s) <= nowMs }

// restate returns the level under limit to that holds at nowMs what s holds
// under limit from (whole millitokens, rounded down), as storetest.Restate.
func restate(s tokenbucket.State, from, to tokenbucket.Limit, nowMs int64) tokenbucket.State {
	held := from.Tokens(s, nowMs)
	return tokenbucket.State{X: to.Empty(nowMs).X.Sub(tokenbucket.Mul(int64(held), to.RefillPeriod.Milliseconds()))}
}

// cloneKey copies the key strings into one allocation, so that a stored key
// never pins the caller's (possibly much larger) buffers.
func cloneKey(k cascade.Key, limit string) bucketKey {
	var b strings.Builder
	b.Grow(len(k.Namespace) + len(k.Entity) + len(k.Resource) + len(limit))
	b.WriteString(k.Namespace)
	b.WriteString(k.Entity)
	b.WriteString(k.Resource)
	b.WriteString(limit)
	all := b.String()
	i := 0
	next := func(n int) string { s := all[i : i+n]; i += n; return s }
	return bucketKey{
		key: cascade.Key{
			Namespace: next(len(k.Namespace)),
			Entity:    next(len(k.Entity)),
			Resource:  next(len(k.Resource)),
		},
		limit: next(len(limit)),
	}
}

func entryBytes(k *bucketKey) int64 {
	return int64(entryOverhead + len(k.key.Namespace) + len(k.key.Entity) + len(k.key.Resource) + len(k.limit))
}

// Run sweeps the store every sweep interval, dropping the buckets that would
// be full again, until ctx ends; then it returns nil. It starts no other
// goroutine.
func (s *Store) Run(ctx context.Context) error {
	t := time.NewTicker(s.sweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			s.sweep()
		}
	}
}

// sweep drops every bucket that would be full now, one shard at a time.
func (s *Store) sweep() {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		nowMs := s.now().UnixMilli()
		for k, e := range sh.m {
			if isFull(e, nowMs) {
				delete(sh.m, k)
				sh.bytes -= entryBytes(&k)
				s.evictions.Add(1)
			}
		}
		sh.mu.Unlock()
	}
}

// Stats returns the store's size and counters. It locks each shard briefly.
func (s *Store) Stats() Stats {
	st := Stats{Evictions: s.evictions.Load(), Rejected: s.rejected.Load()}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		st.Buckets += len(sh.m)
		st.Bytes += sh.bytes
		sh.mu.Unlock()
	}
	return st
}
