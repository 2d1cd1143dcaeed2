package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"github.com/redis/rueidis"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
)

// Stored limits and entity records as decisions see them: read from Redis
// at most once per Config.ConfigCacheTTL (± 10%) per replica, in one
// pipelined call of every record a decision lacks, shared by every
// decision that wants the same records meanwhile.

// DefaultConfigCacheTTL is how long a replica trusts the stored limits and
// entity records it read (Config.ConfigCacheTTL).
const DefaultConfigCacheTTL = 60 * time.Second

// maxCached bounds the records a replica caches: the least recently used
// go first.
const maxCached = 100_000

// records is a replica's cache of stored records (hashes).
type records struct {
	mu      sync.Mutex
	lru     *simplelru.LRU[recordID, cachedHash] // made on first use
	flights map[recordID]*readFlight
}

// recordID names a stored record: its namespace, its kind ('e' an entity
// record, 'l' the limits of an entity and a resource, 'L' an entity's
// default limits, 'R' a resource's, 'S' the system's), its entity and its
// resource. The cache is keyed by it, so that a decision whose records
// are cached builds no Redis key.
type recordID struct {
	ns               string
	kind             byte
	entity, resource string
}

// key is id's Redis key.
func (ks keyspace) key(id recordID) string {
	switch id.kind {
	case 'e':
		return ks.entity(id.ns, id.entity)
	case 'l', 'L':
		return ks.limits(id.ns, Scope{Entity: id.entity, Resource: id.resource})
	case 'R':
		return ks.limits(id.ns, Scope{Resource: id.resource})
	}
	return ks.limits(id.ns, Scope{System: true})
}

// limitsID is the recordID of the limits stored at sc in namespace ns.
func limitsID(ns string, sc Scope) recordID {
	switch {
	case sc.Entity != "" && sc.Resource != "":
		return recordID{ns: ns, kind: 'l', entity: sc.Entity, resource: sc.Resource}
	case sc.Entity != "":
		return recordID{ns: ns, kind: 'L', entity: sc.Entity}
	case sc.System:
		return recordID{ns: ns, kind: 'S'}
	}
	return recordID{ns: ns, kind: 'R', resource: sc.Resource}
}

// cachedHash is a hash as read: its fields, and those that are limits.
type cachedHash struct {
	expires time.Time
	fields  map[string]string
	limits  map[string]cascade.NamedLimit
}

// readFlight is one read of records in flight: its waiters wait on done.
type readFlight struct {
	done chan struct{}
	err  error
}

// forget drops key: this replica wrote it.
func (r *records) forget(key recordID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lru != nil {
		r.lru.Remove(key)
	}
}

// now is the store's clock: Config.Now's when set.
func (s *Store) now() time.Time {
	if s.cfg.Now != nil {
		return s.cfg.Now()
	}
	return time.Now()
}

// ttl is the lifetime of an entry read now: Config.ConfigCacheTTL ± 10%.
func (s *Store) ttl() time.Duration {
	t := s.cfg.ConfigCacheTTL
	if t <= 0 {
		t = DefaultConfigCacheTTL
	}
	return t + time.Duration(rand.Int64N(int64(t)/5+1)) - t/10
}

// hashes returns the hashes keys, from the cache or, for those it lacks or
// holds past their lifetime, by one pipelined read (waiting for the reads
// other decisions started of some of them). ctx's end while waiting for
// another's read is an error wrapping cascade.ErrContended; a read Redis
// did not answer is one wrapping ErrUnavailable.
func (s *Store) hashes(ctx context.Context, keys []recordID) (map[recordID]cachedHash, error) {
	now := s.now()
	out := make(map[recordID]cachedHash, len(keys))
	var mine []recordID
	var wait []*readFlight
	var own *readFlight
	s.cache.mu.Lock()
	s.cache.init()
	for _, k := range keys {
		if h, ok := s.cache.lru.Get(k); ok && now.Before(h.expires) {
			out[k] = h
			continue
		}
		if f, ok := s.cache.flights[k]; ok {
			wait = append(wait, f)
			continue
		}
		if own == nil {
			own = &readFlight{done: make(chan struct{})}
		}
		s.cache.flights[k] = own
		mine = append(mine, k)
	}
	s.cache.mu.Unlock()
	if own != nil {
		own.err = s.readHashes(mine)
		close(own.done)
		if own.err != nil {
			return nil, own.err
		}
	}
	for _, f := range wait {
		select {
		case <-f.done:
			if f.err != nil {
				return nil, f.err
			}
		case <-ctx.Done():
			return nil, fmt.Errorf("redisstore: stored limits not read in time: %w: %w", cascade.ErrContended, ctx.Err())
		}
	}
	if len(out) < len(keys) {
		s.cache.mu.Lock()
		for _, k := range keys {
			if _, ok := out[k]; !ok {
				out[k], _ = s.cache.lru.Peek(k)
			}
		}
		s.cache.mu.Unlock()
	}
	return out, nil
}

// readHashes reads keys in one pipelined call, within the store's budget
// and bound on calls in flight, and caches them; their flight ends.
func (s *Store) readHashes(keys []recordID) error {
	defer func() {
		s.cache.mu.Lock()
		for _, k := range keys {
			delete(s.cache.flights, k)
		}
		s.cache.mu.Unlock()
	}()
	c, err := s.conn()
	if err != nil {
		return err
	}
	if err := s.acquireSlot(); err != nil {
		return err
	}
	defer s.releaseSlot()
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Timeout)
	defer cancel()
	cmds := make(rueidis.Commands, len(keys))
	for i, k := range keys {
		cmds[i] = c.B().Hgetall().Key(s.keys.key(k)).Build()
	}
	got := make([]cachedHash, len(keys))
	for i, r := range c.DoMulti(ctx, cmds...) {
		m, err := r.AsStrMap()
		if err != nil {
			return fmt.Errorf("redisstore: reading stored limits: %w", classify(err))
		}
		got[i] = cachedHash{fields: m, limits: limitsOf(m)}
	}
	now := s.now()
	s.cache.mu.Lock()
	defer s.cache.mu.Unlock()
	for i, k := range keys {
		got[i].expires = now.Add(s.ttl())
		s.cache.lru.Add(k, got[i])
	}
	return nil
}

// limitsOf is the fields of a hash that are limits, by name.
func limitsOf(m map[string]string) map[string]cascade.NamedLimit {
	var out map[string]cascade.NamedLimit
	for name, v := range m {
		if l, err := parseShape(v); err == nil && l.Validate() == nil {
			if out == nil {
				out = map[string]cascade.NamedLimit{}
			}
			out[name] = cascade.NamedLimit{Name: name, Bucket: l}
		}
	}
	return out
}

// entityID is the entity a bucket's stored records are under: its
// entity up to the first '#' (a hierarchical rule's branch follows it).
func entityID(entity string) (id, suffix string) { return dynamo.SplitEntity(entity) }

// scopesOf are the limits hashes a debit of key looks its limit up in,
// most specific first: entity and resource, entity default, resource,
// system.
func (s *Store) scopesOf(key cascade.Key) [4]recordID {
	ns := s.keys.namespace(key)
	id, _ := entityID(key.Entity)
	return [4]recordID{
		{ns: ns, kind: 'l', entity: id, resource: key.Resource},
		{ns: ns, kind: 'L', entity: id},
		{ns: ns, kind: 'R', resource: key.Resource},
		{ns: ns, kind: 'S'},
	}
}

// init makes the cache on first use; the caller holds mu.
func (r *records) init() {
	if r.lru == nil {
		r.lru, _ = simplelru.NewLRU[recordID, cachedHash](maxCached, nil)
		r.flights = map[recordID]*readFlight{}
	}
}

// resolve returns debits with each limit replaced by the one of its name
// stored at the most specific scope of its item, if any (debits itself
// when none is). A plan whose records are all cached is resolved under
// the cache's lock alone.
func (s *Store) resolve(ctx context.Context, debits []cascade.Debit) ([]cascade.Debit, error) {
	scopes := make([][4]recordID, len(debits))
	for i := range debits {
		if i > 0 && debits[i].Key == debits[i-1].Key {
			scopes[i] = scopes[i-1]
			continue
		}
		scopes[i] = s.scopesOf(debits[i].Key)
	}
	now := s.now()
	s.cache.mu.Lock()
	s.cache.init()
	out, ok := debits, true
	for i := 0; i < len(debits) && ok; i++ {
		var l cascade.NamedLimit
		l, ok = s.cachedLimit(now, scopes[i], debits[i].Limit)
		out = override(out, debits, i, l)
	}
	s.cache.mu.Unlock()
	if ok {
		return out, nil
	}
	var keys []recordID
	for i := range scopes {
		for _, k := range scopes[i] {
			if !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
		// On a cluster the entity's record names its chain's root, its
		// keys' slot (chain.go): read in the same call.
		if e := (recordID{ns: scopes[i][0].ns, kind: 'e', entity: scopes[i][0].entity}); s.clustered() && e.entity != "" && !slices.Contains(keys, e) {
			keys = append(keys, e)
		}
	}
	got, err := s.hashes(ctx, keys)
	if err != nil {
		return nil, err
	}
	out = debits
	for i := range debits {
		var l cascade.NamedLimit
		for _, k := range scopes[i] {
			var found bool
			if l, found = got[k].limits[debits[i].Limit]; found {
				break
			}
		}
		out = override(out, debits, i, l)
	}
	return out, nil
}

// cachedLimit is the limit of name stored at the most specific of scopes
// (zero when none is), and false when a scope is not cached or expired;
// the caller holds the cache's lock.
func (s *Store) cachedLimit(now time.Time, scopes [4]recordID, name string) (cascade.NamedLimit, bool) {
	var out cascade.NamedLimit
	found := false
	for _, k := range scopes {
		h, ok := s.cache.lru.Get(k)
		if !ok || !now.Before(h.expires) {
			return cascade.NamedLimit{}, false
		}
		if l, ok := h.limits[name]; ok && !found {
			out, found = l, true
		}
	}
	return out, true
}

// override is out with debit i's limit replaced by l (when l names one
// and it differs), copying debits the first time.
func override(out, debits []cascade.Debit, i int, l cascade.NamedLimit) []cascade.Debit {
	if l.Name == "" || l.Bucket == debits[i].Bucket {
		return out
	}
	if &out[0] == &debits[0] {
		out = slices.Clone(debits)
	}
	out[i].Bucket = l.Bucket
	return out
}

// Ancestors returns the stored ancestors of key's entity that a debit of
// key is also charged to, nearest first, at most max of them, as the
// DynamoDB store does: the entity is key.Entity up to its first '#', and
// each ancestor's bucket keeps what follows ({namespace, P + suffix,
// key.Resource}). The walk follows the entity records' parents while a
// parent has a record with Cascade set; it stops at one without, at max,
// at a parent no request value names, and before an entity already
// visited (a cycle). Each ancestor's Limits are those stored for it and
// key.Resource, else its default limits, sorted by name. The records come
// from the replica's cache (see hashes).
func (s *Store) Ancestors(ctx context.Context, key cascade.Key, max int) ([]cascade.Ancestor, error) {
	id, suffix := entityID(key.Entity)
	if max <= 0 || id == "" {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	ns := s.keys.namespace(key)
	seen := []string{id}
	var out []cascade.Ancestor
	for cur := id; len(out) < max; {
		ent, _, err := s.level(ctx, ns, cur, key.Resource)
		if err != nil {
			return nil, err
		}
		p := ent.fields[fieldParent]
		if p == "" || slices.Contains(seen, p) {
			break
		}
		if _, ok := dynamo.RequestForm(p); !ok {
			break
		}
		seen = append(seen, p)
		up, limits, err := s.level(ctx, ns, p, key.Resource)
		if err != nil {
			return nil, err
		}
		if up.fields[fieldCascade] != "1" {
			break
		}
		out = append(out, cascade.Ancestor{Key: cascade.Key{Namespace: ns, Entity: p + suffix, Resource: key.Resource}, Limits: limits})
		cur = p
	}
	return out, nil
}

// level reads entity id's record and the limits stored for it and
// resource, else its default limits, sorted by name.
func (s *Store) level(ctx context.Context, ns, id, resource string) (cachedHash, []cascade.NamedLimit, error) {
	keys := []recordID{{ns: ns, kind: 'e', entity: id}, {ns: ns, kind: 'l', entity: id, resource: resource}, {ns: ns, kind: 'L', entity: id}}
	got, err := s.hashes(ctx, keys)
	if err != nil {
		return cachedHash{}, nil, err
	}
	lm := got[keys[1]].limits
	if len(lm) == 0 {
		lm = got[keys[2]].limits
	}
	var limits []cascade.NamedLimit
	for _, l := range lm {
		limits = append(limits, l)
	}
	slices.SortFunc(limits, func(a, b cascade.NamedLimit) int { return strings.Compare(a.Name, b.Name) })
	return got[keys[0]], limits, nil
}
