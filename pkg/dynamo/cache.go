package dynamo

import (
	"slices"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo/demand"
	"github.com/dynalimit/dynalimit/pkg/dynamo/item"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// Names of the store's local caches (CacheStats.Name).
const (
	CacheImage     = "image"
	CacheConfig    = "config"
	CacheShard     = "shard"
	CacheEntity    = "entity"
	CacheRejection = "rejection"
)

// CacheStats is one local cache's size and use, as Store.CacheStats reports
// it.
type CacheStats struct {
	// Name is one of CacheImage, CacheConfig, CacheShard, CacheEntity and
	// CacheRejection.
	Name string
	// Entries is how many entries it holds now; Capacity bounds it (zero:
	// the cache is disabled).
	Entries, Capacity int
	// Hits and Misses count the lookups that found an entry or none;
	// Evictions counts the entries dropped, least recently used first, to
	// make room for others.
	Hits, Misses, Evictions uint64
}

// lru is one of the store's local caches: at most its capacity of entries,
// the least recently used dropped first, so that a flood of keys seen once
// evicts its own entries before the ones in use. It is guarded by the
// store's mu.
type lru[V any] struct {
	name                    string
	capacity                int
	l                       *simplelru.LRU[string, V] // nil: disabled
	hits, misses, evictions uint64
}

// newLRU returns a cache of at most capacity entries; capacity ≤ 0 returns
// a disabled cache, which holds nothing.
func newLRU[V any](name string, capacity int) *lru[V] {
	c := &lru[V]{name: name, capacity: max(capacity, 0)}
	if capacity > 0 {
		c.l, _ = simplelru.NewLRU[string, V](capacity, nil) // errs only on capacity ≤ 0
	}
	return c
}

// get returns k's entry, counting a hit or a miss, and marks it used.
func (c *lru[V]) get(k string) (V, bool) {
	var v V
	ok := false
	if c.l != nil {
		v, ok = c.l.Get(k)
	}
	if ok {
		c.hits++
	} else {
		c.misses++
	}
	return v, ok
}

// peek returns k's entry without counting the lookup or marking it used.
func (c *lru[V]) peek(k string) (V, bool) {
	if c.l == nil {
		var v V
		return v, false
	}
	return c.l.Peek(k)
}

// add stores v under k, dropping the least recently used entry if the
// cache is full.
func (c *lru[V]) add(k string, v V) {
	if c.l != nil && c.l.Add(k, v) {
		c.evictions++
	}
}

func (c *lru[V]) remove(k string) {
	if c.l != nil {
		c.l.Remove(k)
	}
}

func (c *lru[V]) stats() CacheStats {
	st := CacheStats{Name: c.name, Capacity: c.capacity, Hits: c.hits, Misses: c.misses, Evictions: c.evictions}
	if c.l != nil {
		st.Entries = c.l.Len()
	}
	return st
}

// caches are the store's local caches, guarded by its mu. Each is bounded
// by entries: a request can grow every one of them.
type caches struct {
	images  *lru[*item.Image]  // bucket PK → last image this replica saw
	shards  *lru[int]          // bucket base key → shard count
	rejects *lru[rejected]     // bucket base key → refusal until
	configs *lru[cachedConfig] // config record PK\x00SK → stored limits
	ents    *lru[cachedEntity] // entity PK → entity record
	warned  *lru[time.Time]    // namespace\x00entity id → when a problem of its stored chain was logged
	// forgot holds the images forgotten because a write went unanswered:
	// no longer what a write conditions on, still what LastSeen reports.
	forgot *lru[*item.Image]
	// heats: bucket base key → hot until (pace.go); shared: bucket base
	// key → crowded until (other writers seen); otherRates: bucket PK →
	// what the shard's other writers take of it.
	heats      *lru[int64]
	shared     *lru[int64]
	otherRates *lru[others]
	asks       *demand.Asks // bucket base key → what this replica asks of it (pace.go)
	// demand follows this replica's part of each limit's consumption
	// (Store.Demand); it has a lock of its own.
	demand *demand.Table
}

// newCaches returns caches of size entries each, but the rejection cache,
// of rejections.
func newCaches(size, rejections int) caches {
	return caches{
		images:     newLRU[*item.Image](CacheImage, size),
		shards:     newLRU[int](CacheShard, size),
		rejects:    newLRU[rejected](CacheRejection, rejections),
		configs:    newLRU[cachedConfig](CacheConfig, size),
		ents:       newLRU[cachedEntity](CacheEntity, size),
		warned:     newLRU[time.Time]("warned", maxWarned),
		forgot:     newLRU[*item.Image]("forgot", maxForgot),
		heats:      newLRU[int64]("heat", maxHot),
		shared:     newLRU[int64]("shared", maxHot),
		otherRates: newLRU[others]("others", maxHot),
		asks:       demand.NewAsks(maxHot),
		demand:     demand.New(),
	}
}

// maxHot bounds the hot buckets, and their shards, whose heat and
// other writers the store follows (pace.go).
const maxHot = 4096

// maxForgot bounds the forgotten images kept for LastSeen.
const maxForgot = 4096

// maxWarned bounds the entities whose broken stored chain the store
// remembers having logged.
const maxWarned = 1024

// DefaultCacheSize bounds each of the image, config, shard and entity
// caches (entries) unless WithCacheSize says otherwise.
const DefaultCacheSize = maxImages

// WithCacheSize bounds each of the store's image, config, shard and entity
// caches to n entries (default DefaultCacheSize; n ≤ 0 keeps it). The
// rejection cache is bounded by Config.RejectionCacheSize.
func WithCacheSize(n int) Option {
	return func(s *Store) {
		if n > 0 {
			s.caches = newCaches(n, s.cfg.RejectionCacheSize)
		}
	}
}

// CacheStats returns the size and use of each of the store's local caches:
// image, config, shard, entity and rejection. It is cheap enough to call at
// every metrics scrape (it holds the store's lock briefly).
func (s *Store) CacheStats() []CacheStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return []CacheStats{s.images.stats(), s.configs.stats(), s.shards.stats(), s.ents.stats(), s.rejects.stats()}
}

// maxRejection bounds how long a refusal is answered from the rejection
// cache: levels only rise between refunds, so until then the last image
// refuses at most what the table would, and refunds wait at most a second.
const maxRejection = time.Second

type rejected struct {
	untilMs int64
	shard   int
}

func (s cacher) cachedImage(pk string) *item.Image {
	s.mu.Lock()
	defer s.mu.Unlock()
	img, _ := s.images.get(pk)
	return img
}

func (s cacher) forgetImage(pk string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if img, ok := s.images.peek(pk); ok {
		s.forgot.add(pk, img)
	}
	s.images.remove(pk)
}

// keepImage records img as the last image of pk, learns the shard count
// it carries, and counts the consumption it shows (Demand).
func (s cacher) keepImage(b bucket, pk string, img *item.Image) {
	s.mu.Lock()
	s.images.add(pk, img)
	s.mu.Unlock()
	s.demand.Saw(pk, b.ns, b.key, img, s.nowMs())
	s.learnImage(b.base, img)
}

// learnImage learns the shard count a bucket item carries: a larger count
// from any shard (a doubling), a smaller one from a shard a merge removed
// (image.gone: the count it carries is the bucket's since the merge).
func (s cacher) learnImage(base string, img *item.Image) {
	switch {
	case !img.Exists:
	case img.Merged:
		s.shrinkShards(base, img.ShardCount)
	default:
		s.learnShards(base, img.ShardCount)
	}
}

func (s cacher) shardCount(base string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n, ok := s.shards.get(base); ok {
		return n
	}
	return 1
}

func (s cacher) learnShards(base string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, _ := s.shards.peek(base); n > old {
		s.shards.add(base, n)
	}
}

// shrinkShards lowers the shard count cached for base to n (a merge).
func (s cacher) shrinkShards(base string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.shards.peek(base); ok && n < old {
		s.shards.add(base, n)
	}
}

// rememberRefusal records that pt's item refused it, until the refusal's
// retry-after (at most maxRejection).
func (s cacher) rememberRefusal(pt *part, nowMs int64) {
	if s.cfg.RejectionCacheSize <= 0 {
		return
	}
	var wait time.Duration
	for i, st := range pt.dec.Statuses {
		if !st.OK && pt.debits[i].Role == cascade.Enforce {
			wait = max(wait, st.RetryAfter)
		}
	}
	if wait <= 0 {
		return
	}
	until := nowMs + min(wait, maxRejection).Milliseconds()
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.rejects.peek(pt.b.base); ok && r.untilMs >= until && r.shard == pt.shard {
		return
	}
	s.rejects.add(pt.b.base, rejected{untilMs: until, shard: pt.shard})
}

// fromRejectionCache answers a plan that consumes without DynamoDB when one
// of its items refused recently and deciding on the images this replica
// holds still refuses: levels only rise between refunds, so until the
// refusal's retry-after (at most maxRejection) the last image refuses at
// most what the table would. Items without an image count as full.
func (s cacher) fromRejectionCache(p *cascade.Plan, buckets []bucket) (cascade.Decision, bool) {
	if s.cfg.RejectionCacheSize <= 0 {
		return cascade.Decision{}, false
	}
	consumes := false
	for i := range p.Debits {
		switch p.Debits[i].Op {
		case cascade.Charge, cascade.Refund:
			return cascade.Decision{}, false
		case cascade.Consume:
			consumes = consumes || p.Debits[i].Amount > 0
		}
	}
	if !consumes {
		return cascade.Decision{}, false // checks always ask the table
	}
	now := s.nowMs()
	imgs := make([]*item.Image, len(buckets))
	shards := make([]int, len(buckets))
	homes := s.homes(buckets)
	hit := false
	s.mu.Lock()
	for i, b := range buckets {
		r, ok := s.rejects.get(b.base)
		if !ok || homes[i] >= 0 && r.shard != homes[i] {
			// A hot bucket's decision goes to this replica's home shard:
			// a refusal on another says nothing of it.
			imgs[i], _ = s.images.peek(b.pk(0))
			continue
		}
		if r.untilMs <= now {
			// Kept past its retry-after: it still says the item refused
			// recently (gated, gate.go).
			imgs[i], _ = s.images.peek(b.pk(0))
			continue
		}
		hit = true
		imgs[i], _ = s.images.peek(b.pk(r.shard))
		shards[i] = r.shard
	}
	s.mu.Unlock()
	if !hit {
		return cascade.Decision{}, false
	}
	q := &cascade.Plan{Debits: append([]cascade.Debit(nil), p.Debits...)}
	slot := make([]int, len(q.Debits))
	var keys []string
	var levels []tokenbucket.Level
	shardOf := make([]int, len(q.Debits))
	for i := range q.Debits {
		d := &q.Debits[i]
		bi := slices.IndexFunc(buckets, func(b bucket) bool { return b.key == d.Key })
		shardOf[i] = shards[bi]
		img := imgs[bi]
		if img != nil && img.Exists && img.ShardCount > 1 {
			d.Amount = mulSat(d.Amount, img.ShardCount)
		}
		k := buckets[bi].base + "\x00" + d.Limit
		if slot[i] = slices.Index(keys, k); slot[i] < 0 {
			lv, _ := startLevel(img, item.LimitPrefix(d.Limit), d.Bucket, now)
			slot[i] = len(keys)
			keys = append(keys, k)
			levels = append(levels, lv)
		}
	}
	dec := cascade.Decide(q, slot, levels, now)
	if dec.Admitted {
		return cascade.Decision{}, false
	}
	for i := range dec.Statuses {
		dec.Statuses[i].Shard = shardOf[i]
	}
	return dec, true
}

// homes are the home shards of the hot buckets among buckets (pace.go),
// -1 for the others.
func (s cacher) homes(buckets []bucket) []int {
	out := make([]int, len(buckets))
	for i, b := range buckets {
		out[i] = -1
		if s.shardCount(b.base) > 1 && s.hot(b.base) {
			out[i] = pacer(s).shardFor(b)
		}
	}
	return out
}

// mulSat returns a·n, saturating at tokenbucket.MaxMillitokens.
func mulSat(a tokenbucket.Millitokens, n int) tokenbucket.Millitokens {
	if n <= 1 || a <= 0 {
		return a
	}
	if a > tokenbucket.MaxMillitokens/tokenbucket.Millitokens(n) {
		return tokenbucket.MaxMillitokens
	}
	return a * tokenbucket.Millitokens(n)
}

// ForgetConfig drops the cached stored limits of the config record pk, sk:
// a writer of limits calls it so that this store's next decision reads
// what it wrote.
func (s *Store) ForgetConfig(pk, sk string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.configs.remove(pk + "\x00" + sk)
}

// ForgetEntity drops the cached entity record pk: a writer of entities
// calls it so that this store's next decision reads what it wrote.
func (s *Store) ForgetEntity(pk string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ents.remove(pk)
}

// KeepEntity caches what a strongly consistent read of the entity record
// pk found (ok false: no record), for Config.ConfigCacheTTL.
func (s *Store) KeepEntity(pk string, e Entity, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ents.add(pk, cachedEntity{expires: s.now().Add(s.cacheTTL()), ent: e, ok: ok})
}

// cacher reads and fills the store's caches of items, shard counts and refusals (cache.go).
type cacher struct{ *Store }

// Demand returns this replica's part, 0 to 1, of the recent consumption of
// debit d's limit, and whether it knows one (package demand: what it
// debited over what the fleet did, from the images DynamoDB returned, over
// about the last 5 s). It makes no call: ON_UNAVAILABLE=local sizes an
// item's local bucket by it.
func (s *Store) Demand(d *cascade.Debit) (part float64, known bool) {
	return s.demand.Part(s.ns(d.Key), d)
}
