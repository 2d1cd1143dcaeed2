package dynamo

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo/item"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

type cachedConfig struct {
	expires time.Time
	limits  map[string]tokenbucket.Limit // nil: no record
}

// configChain is where stored limits for one bucket item are looked up, in
// order: entity+resource, entity default, resource, system. The entity is
// the bucket's entity up to its first '#': a hierarchical bucket carries
// the other entries of its branch after it, and the entity's stored limits
// apply to each of its branches.
func configChain(b bucket) [4][2]string {
	id, _ := SplitEntity(b.key.Entity)
	return [4][2]string{
		{item.EntityPK(b.ns, id), item.EntityConfigSK(b.key.Resource)},
		{item.EntityPK(b.ns, id), item.EntityDefaultSK},
		{item.ResourcePK(b.ns, b.key.Resource), item.SKConfig},
		{item.SystemPK(b.ns), item.SKConfig},
	}
}

// loadConfigs resolves stored limits for every debit of p (in place). Config
// records the cache lacks are read once per record however many decisions
// want them (single flight), in a read that outlives the decisions that gave
// up on it, so the cache fills. A record past its lifetime (limitsTTL) is
// served as it is while one read refreshes it, within staleGrace; later it
// is read as a missing one.
func (s *Store) loadConfigs(ctx context.Context, p *cascade.Plan, buckets []bucket) error {
	now := s.now()
	var missing, stale []string
	seen := map[string]bool{}
	s.mu.Lock()
	for _, b := range buckets {
		for _, r := range configChain(b) {
			k := r[0] + "\x00" + r[1]
			if seen[k] {
				continue
			}
			seen[k] = true
			switch cc, ok := s.configs.get(k); {
			case !ok, now.Sub(cc.expires) >= s.staleGrace():
				missing = append(missing, k)
			case !now.Before(cc.expires):
				stale = append(stale, k)
			}
		}
	}
	s.mu.Unlock()
	if len(stale) > 0 {
		s.loadRecords(ctx, stale) // refresh in the background; the stale records serve meanwhile
	}
	if len(missing) > 0 {
		for _, f := range s.loadRecords(ctx, missing) {
			if err := (reader{s}).wait(ctx, f); err != nil {
				return err
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range p.Debits {
		d := &p.Debits[i]
		for _, b := range buckets {
			if b.key != d.Key {
				continue
			}
			for _, r := range configChain(b) {
				cc, _ := s.configs.peek(r[0] + "\x00" + r[1])
				if l, ok := cc.limits[d.Limit]; ok {
					d.Bucket = l
					break
				}
			}
			break
		}
	}
	return nil
}

// loadRecords returns the flights that read config and entity records keys
// ("PK\x00SK"; an entity record's SK is #META) for the decision on ctx, starting one read for the keys no
// flight has yet.
func (s *Store) loadRecords(ctx context.Context, keys []string) []*flight {
	return reader{s}.flyRecords(keys, []context.Context{ctx}, s.readRecords)
}

func (s *Store) readRecords(ctx context.Context, keys []string, f *flight) error {
	req := make([]map[string]types.AttributeValue, len(keys))
	for i, k := range keys {
		pk, sk, _ := strings.Cut(k, "\x00")
		req[i] = item.Key(pk, sk)
	}
	got, err := s.batchGet(ctx, req, false, &f.throttled)
	if err != nil {
		return err
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		expires := now.Add(s.cacheTTL())
		if pk, sk, _ := strings.Cut(k, "\x00"); sk == item.SKMeta {
			ent, ok := EntityOf(got[k])
			s.ents.add(pk, cachedEntity{expires: expires, ent: ent, ok: ok})
			continue
		}
		s.configs.add(k, cachedConfig{expires: now.Add(s.limitsTTL()), limits: item.DecodeLimits(got[k])})
	}
	return nil
}

// cacheTTL is the lifetime of a new entry of the config or entity cache:
// Config.ConfigCacheTTL ± 10%, so that records read together do not all
// expire together.
func (s *Store) cacheTTL() time.Duration {
	ttl := s.cfg.ConfigCacheTTL
	return ttl + time.Duration(rand.Int64N(int64(ttl)/5+1)) - ttl/10
}

// limitsTTL is the lifetime of a new entry of the config cache (stored
// limits): 80 to 90% of Config.ConfigCacheTTL, spread so that records read
// together do not all expire together. With staleGrace it bounds when a
// stored limit applies: to every decision made Config.ConfigCacheTTL or
// more after it was stored.
func (s *Store) limitsTTL() time.Duration {
	ttl := s.cfg.ConfigCacheTTL
	return ttl - ttl/5 + time.Duration(rand.Int64N(int64(ttl)/10+1))
}

// staleGrace is how long past its lifetime a stored limit record still
// serves while one read refreshes it: after that a decision waits for the
// read, as for a record never read (a replica idle for a while does not
// decide on a limit older than Config.ConfigCacheTTL).
func (s *Store) staleGrace() time.Duration { return s.cfg.ConfigCacheTTL / 10 }

// batchGet reads keys, within ctx's deadline, and returns the items by PK+"\x00"+SK.
func (s *Store) batchGet(ctx context.Context, keys []map[string]types.AttributeValue, consistent bool, throttled *atomic.Bool) (map[string]map[string]types.AttributeValue, error) {
	out := map[string]map[string]types.AttributeValue{}
	for len(keys) > 0 {
		n := min(len(keys), 100)
		req := map[string]types.KeysAndAttributes{s.cfg.Table: {Keys: keys[:n], ConsistentRead: aws.Bool(consistent)}}
		keys = keys[n:]
		for round := 0; len(req) > 0; round++ {
			if round > 0 && !Sleep(ctx, Backoff(round)) {
				return nil, fmt.Errorf("dynamo: batch get %s: not read within the budget: %w", s.cfg.Table, ErrUnavailable)
			}
			res, err := s.api.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: req, ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal})
			if err != nil {
				cerr := Classify("batch get "+s.cfg.Table, err)
				if errors.Is(cerr, ErrThrottled) {
					throttled.Store(true)
					continue // retried within ctx, after a backoff
				}
				return nil, cerr
			}
			for _, it := range res.Responses[s.cfg.Table] {
				out[item.GetS(it, item.AttrPK)+"\x00"+item.GetS(it, item.AttrSK)] = it
			}
			req = res.UnprocessedKeys
			if len(req) > 0 {
				throttled.Store(true) // DynamoDB left keys for later: throughput
			}
		}
	}
	return out, nil
}
