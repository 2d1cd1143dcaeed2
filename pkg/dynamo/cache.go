package dynamo

import (
	"time"

	"github.com/dynalimit/dynalimit/pkg/cascade"
)

func (s *Store) cachedImage(pk string) *image {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.images[pk]
}

func (s *Store) forgetImage(pk string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.images, pk)
}

// setImage records img as it's image (nil forgets it) and learns the shard
// count it carries. An image with a different shard count than assumed moves
// the item to a shard of the count it shows.
func (s *Store) setImage(it *item, img *image, fresh bool) {
	it.img, it.fresh = img, fresh && img != nil
	s.mu.Lock()
	if img == nil {
		delete(s.images, it.pk)
	} else {
		if len(s.images) >= maxImages {
			evict(s.images, maxImages/100+1)
		}
		s.images[it.pk] = img
	}
	s.mu.Unlock()
	if img != nil && img.exists && img.shardCount != it.n {
		s.learnShards(it.base, img.shardCount)
		if img.shardCount > it.n {
			it.n = img.shardCount
		}
	}
}

func evict[V any](m map[string]V, k int) {
	for key := range m {
		if k <= 0 {
			return
		}
		delete(m, key)
		k--
	}
}

func (s *Store) shardCount(base string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n, ok := s.shards[base]; ok {
		return n
	}
	return 1
}

func (s *Store) learnShards(base string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n > s.shards[base] {
		if len(s.shards) >= maxImages {
			evict(s.shards, maxImages/100+1)
		}
		s.shards[base] = n
	}
}

// maxRejection bounds how long a refusal is answered locally: refunds,
// adjustments and compensations can return tokens before a long retry-after.
const maxRejection = time.Second

// rememberRefusal records, for every item that refused an enforced debit of
// a plan decided on fresh images, how long it cannot admit again.
func (s *Store) rememberRefusal(q *cascade.Plan, dec cascade.Decision, items []*item, byKey map[cascade.Key]int, nowMs int64) {
	if s.cfg.RejectionCacheSize < 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range q.Debits {
		st := dec.Statuses[i]
		if st.OK || st.RetryAfter <= 0 {
			continue
		}
		it := items[byKey[q.Debits[i].Key]]
		until := nowMs + min(st.RetryAfter, maxRejection).Milliseconds()
		if r, ok := s.rejects[it.base]; ok && r.untilMs >= until && r.shard == it.shard {
			continue
		}
		if len(s.rejects) >= s.cfg.RejectionCacheSize {
			for k, r := range s.rejects {
				if r.untilMs <= nowMs {
					delete(s.rejects, k)
				}
			}
			if len(s.rejects) >= s.cfg.RejectionCacheSize {
				evict(s.rejects, s.cfg.RejectionCacheSize/100+1)
			}
		}
		s.rejects[it.base] = rejected{untilMs: until, shard: it.shard}
	}
}

// fromRejectionCache answers a plan that consumes without DynamoDB when one
// of its items refused recently and deciding on the images this replica saw
// still refuses: tokens only leave a bucket between refills (refunds aside),
// so the last image is an upper bound until the refusal's retry-after (at
// most maxRejection).
func (s *Store) fromRejectionCache(p *cascade.Plan, items []*item, byKey map[cascade.Key]int) (cascade.Decision, bool) {
	if hasCost(p) || s.cfg.RejectionCacheSize < 0 {
		return cascade.Decision{}, false
	}
	consumes := false
	for i := range p.Debits {
		consumes = consumes || (p.Debits[i].Op == cascade.Consume && p.Debits[i].Amount > 0)
	}
	if !consumes {
		return cascade.Decision{}, false // checks always ask the table
	}
	now := s.nowMs()
	hit := false
	s.mu.Lock()
	for _, it := range items {
		r, ok := s.rejects[it.base]
		if !ok {
			continue
		}
		if r.untilMs <= now {
			delete(s.rejects, it.base)
			continue
		}
		if r.shard < it.n {
			hit = true
			it.shard = r.shard
			it.pk = bucketPK(it.ns, it.key.Entity, it.key.Resource, r.shard)
			it.img = s.images[it.pk]
		}
	}
	s.mu.Unlock()
	if !hit {
		return cascade.Decision{}, false
	}
	q := shaped(p, items, byKey)
	idx, slots := slotsOf(q, byKey)
	dec := cascade.Decide(q, idx, states(q, idx, slots, items, now), now)
	if dec.Admitted {
		return cascade.Decision{}, false
	}
	return scaleStatuses(dec, q, items, byKey), true
}

// expired reports whether a cache entry stamped at is older than ttl.
func expired(at time.Time, now time.Time, ttl time.Duration) bool { return now.Sub(at) >= ttl }
