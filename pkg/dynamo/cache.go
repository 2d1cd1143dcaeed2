package dynamo

import (
	"time"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// maxRejection bounds how long a refusal is answered from the rejection
// cache: levels only rise between refunds, so until then the last image
// refuses at most what the table would, and refunds wait at most a second.
const maxRejection = time.Second

type rejected struct {
	untilMs int64
	shard   int
}

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

// keepImage records img as the last image of pk and learns the shard count
// it carries.
func (s *Store) keepImage(b bucket, pk string, img *image) {
	s.mu.Lock()
	if len(s.images) >= maxImages {
		evict(s.images, maxImages/100+1)
	}
	s.images[pk] = img
	s.mu.Unlock()
	if img.exists {
		s.learnShards(b.base, img.shardCount)
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

// rememberRefusal records that pt's item refused it, until the refusal's
// retry-after (at most maxRejection).
func (s *Store) rememberRefusal(pt *part, nowMs int64) {
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
	if r, ok := s.rejects[pt.b.base]; ok && r.untilMs >= until && r.shard == pt.shard {
		return
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
	s.rejects[pt.b.base] = rejected{untilMs: until, shard: pt.shard}
}

// fromRejectionCache answers a plan that consumes without DynamoDB when one
// of its items refused recently and deciding on the images this replica
// holds still refuses: levels only rise between refunds, so until the
// refusal's retry-after (at most maxRejection) the last image refuses at
// most what the table would. Items without an image count as full.
func (s *Store) fromRejectionCache(p *cascade.Plan, buckets []bucket) (cascade.Decision, bool) {
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
	imgs := make([]*image, len(buckets))
	hit := false
	s.mu.Lock()
	for i, b := range buckets {
		r, ok := s.rejects[b.base]
		if !ok {
			imgs[i] = s.images[b.pk(0)]
			continue
		}
		if r.untilMs <= now {
			delete(s.rejects, b.base)
			continue
		}
		hit = true
		imgs[i] = s.images[b.pk(r.shard)]
	}
	s.mu.Unlock()
	if !hit {
		return cascade.Decision{}, false
	}
	q := &cascade.Plan{Debits: append([]cascade.Debit(nil), p.Debits...)}
	slot := make([]int, len(q.Debits))
	var keys []string
	var levels []tokenbucket.Level
	for i := range q.Debits {
		d := &q.Debits[i]
		bi := 0
		for buckets[bi].key != d.Key {
			bi++
		}
		img := imgs[bi]
		if img != nil && img.exists && img.shardCount > 1 {
			d.Amount = mulSat(d.Amount, img.shardCount)
		}
		k := buckets[bi].base + "\x00" + d.Limit
		slot[i] = -1
		for j := range keys {
			if keys[j] == k {
				slot[i] = j
			}
		}
		if slot[i] < 0 {
			lv, _ := startLevel(img, limitPrefix(d.Limit), d.Bucket, now)
			slot[i] = len(keys)
			keys = append(keys, k)
			levels = append(levels, lv)
		}
	}
	dec := cascade.Decide(q, slot, levels, now)
	if dec.Admitted {
		return cascade.Decision{}, false
	}
	return dec, true
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

// expired reports whether a cache entry stamped at is older than ttl.
func expired(at time.Time, now time.Time, ttl time.Duration) bool { return now.Sub(at) >= ttl }
