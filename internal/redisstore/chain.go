package redisstore

import (
	"context"
	"slices"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
)

// On a Redis cluster the keys of an entity chain (key → project → tenant,
// entity records whose parents cascade) carry the hash tag of the chain's
// root, not each entity's own: every level of a hierarchy lies in one
// slot, so a plan on a chain is decided all or nothing in one call of the
// script, as on a single Redis. An entity with no cascading parent is its
// own root, and its keys are those a single Redis has. The root is read
// from the entity records, cached as stored limits are (CONFIG_CACHE_TTL):
// moving an entity under another root moves its buckets to the new root's
// slot, where they start full, and a replica that still holds the old
// record decides on the old keys until its cache entry expires.

// maxRootWalk bounds the walk up a chain: a chain deeper than it takes the
// entity it reached as its root (its levels then may lie in two slots,
// decided in parts as unrelated items are).
const maxRootWalk = 64

// chains names the hash tags of a store's keys: the store's, and the store
// whose entity records name its chains (the same one, or the Main of the
// Split the store serves per-second limits for).
type chains struct {
	keys    *Store
	records *Store
}

// recordStore is the store whose entity records name the chains.
func (c chains) recordStore() *Store {
	if c.records != nil {
		return c.records
	}
	return c.keys
}

// rootOf is the root of entity id's chain in namespace ns: the last
// entity reached by following parents that have a record with Cascade
// set and a request-form name, as Ancestors walks them; on a cycle, the
// least name on it (the same from every entity of the cycle).
func (c chains) rootOf(ctx context.Context, ns, id string) (string, error) {
	s := c.recordStore()
	seen := []string{id}
	for cur := id; len(seen) <= maxRootWalk; {
		ent, err := s.hashes(ctx, []recordID{{ns: ns, kind: 'e', entity: cur}})
		if err != nil {
			return "", err
		}
		p := ent[recordID{ns: ns, kind: 'e', entity: cur}].fields[fieldParent]
		if _, ok := dynamo.RequestForm(p); p == "" || !ok {
			return cur, nil
		}
		if i := slices.Index(seen, p); i >= 0 {
			return slices.Min(seen[i:]), nil
		}
		up, err := s.hashes(ctx, []recordID{{ns: ns, kind: 'e', entity: p}})
		if err != nil {
			return "", err
		}
		if up[recordID{ns: ns, kind: 'e', entity: p}].fields[fieldCascade] != "1" {
			return cur, nil
		}
		seen = append(seen, p)
		cur = p
	}
	return seen[len(seen)-1], nil
}

// tagOf is the hash tag of k's keys: on a cluster its chain root's (the
// root keeps the branch after '#' that k's entity has, as ancestors do),
// elsewhere its entity's.
func (c chains) tagOf(ctx context.Context, k cascade.Key) (string, error) {
	s := c.keys
	id, suffix := entityID(k.Entity)
	if id == "" || !s.clustered() {
		return s.keys.tag(k), nil
	}
	root, err := c.rootOf(ctx, s.keys.namespace(k), id)
	if err != nil {
		return "", err
	}
	k.Entity = root + suffix
	return s.keys.tag(k), nil
}

// tagsOf is the hash tag of each debit's keys (tagOf), nil when s is not
// a cluster's (every key then is in one place).
func (c chains) tagsOf(ctx context.Context, debits []cascade.Debit) ([]string, error) {
	if !c.keys.clustered() {
		return nil, nil
	}
	tags := make([]string, len(debits))
	for i := range debits {
		if i > 0 && debits[i].Key == debits[i-1].Key {
			tags[i] = tags[i-1]
			continue
		}
		t, err := c.tagOf(ctx, debits[i].Key)
		if err != nil {
			return nil, err
		}
		tags[i] = t
	}
	return tags, nil
}

// itemKeys is k's keys under its tag (tagOf).
func (c chains) itemKeys(ctx context.Context, k cascade.Key) (itemKeys, error) {
	tag, err := c.tagOf(ctx, k)
	if err != nil {
		return itemKeys{}, err
	}
	return c.keys.keys.itemIn(k, tag), nil
}
