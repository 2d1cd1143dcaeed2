package dynamo

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/descriptors"
	"github.com/dynalimit/dynalimit/pkg/dynamo/item"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// SplitEntity splits a bucket's entity into the entity id (up to the first
// '#') and the rest (from the '#' on, empty when there is none). A
// hierarchical bucket is named by its entity's id followed by "#" and the
// other entries above it (descriptors.Tier); the stored records of the
// entity are under the id alone.
func SplitEntity(entity string) (id, suffix string) {
	if i := strings.IndexByte(entity, '#'); i >= 0 {
		return entity[:i], entity[i:]
	}
	return entity, ""
}

// entityLevel is what the store holds of one entity of a chain: its
// record, and the limits stored for it and one resource.
type entityLevel struct {
	ent    Entity
	ok     bool // the entity record exists
	limits []cascade.NamedLimit
}

// levelKeys are the records of entity id (namespace ns) that one level of
// a chain reads together, as "PK\x00SK": the entity record, its limits for
// resource, and its default limits. The config keys are the ones
// loadConfigs reads, so that the two share reads and cache entries.
func levelKeys(ns, id, resource string) [3]string {
	pk := item.EntityPK(ns, id)
	return [3]string{pk + "\x00" + item.SKMeta, pk + "\x00" + item.EntityConfigSK(resource), pk + "\x00" + item.EntityDefaultSK}
}

// Ancestors returns the stored ancestors of key's entity that a debit of
// Key is also charged to, nearest first, at most max of them. The entity is
// key.Entity up to its first '#'; what follows (from the '#' on) names the
// branch of a hierarchical rule, and every ancestor's bucket keeps it:
// ancestor P's Key is {namespace, P + suffix, key.Resource}.
//
// The walk follows the entity records' parents: a parent is an ancestor
// when its record exists and has Cascade set, and the walk goes on from it;
// it stops at the first parent that does not cascade or has no record, at
// max ancestors, at a parent id that no request value can name (not a
// form descriptors.EscapeValue writes), and at an entity already visited
// (a cycle, logged). Each ancestor's Limits are those stored for it and
// key.Resource, or else its default limits, sorted by name; none when
// nothing is stored.
//
// The records come from the per-replica caches, each entry for
// Config.ConfigCacheTTL ± 10%, so a warm chain makes no DynamoDB call. A
// cold level is one BatchGetItem of the entity record and its two config
// records, read once however many decisions want it (single flight), with
// a deadline of its own that fills the caches even after ctx ends; an
// entry past its lifetime serves while one read refreshes it. ctx is the
// decision's budget: when it ends while waiting for a read that other
// decisions started, the error wraps cascade.ErrContended (the request is
// refused as busy); when DynamoDB did not answer, it wraps ErrUnavailable.
// The walk has Config.Timeout at most, as a decision does.
func (s *Store) Ancestors(ctx context.Context, key cascade.Key, max int) ([]cascade.Ancestor, error) {
	if s.closed.Load() {
		return nil, errClosed
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	id, suffix := SplitEntity(key.Entity)
	if max <= 0 || id == "" {
		return nil, nil
	}
	ns := s.ns(key)
	lv, err := s.level(ctx, ns, id, key.Resource)
	if err != nil {
		return nil, err
	}
	seen := []string{id}
	var out []cascade.Ancestor
	for len(out) < max && lv.ok && lv.ent.Parent != "" {
		p := lv.ent.Parent
		if slices.Contains(seen, p) {
			s.warnChain(ns, append(seen, p), "the entity records' parents form a cycle; the chain stops before it repeats (fix with 'ratelimit entity create ID -parent P')")
			break
		}
		if _, ok := RequestForm(p); !ok {
			s.warnChain(ns, append(seen, p), "an entity record names a parent that no request value can name; the chain stops there (store the parent's escaped form)")
			break
		}
		seen = append(seen, p)
		if lv, err = s.level(ctx, ns, p, key.Resource); err != nil {
			return nil, err
		}
		if !lv.ok || !lv.ent.Cascade {
			break
		}
		out = append(out, cascade.Ancestor{Key: cascade.Key{Namespace: ns, Entity: p + suffix, Resource: key.Resource}, Limits: lv.limits})
	}
	return out, nil
}

// warnChain logs, at most once per cache lifetime and entity, a problem of
// the stored chain ids (entity ids only, nearest first).
func (s *Store) warnChain(ns string, ids []string, msg string) {
	k := ns + "\x00" + ids[0]
	now := s.now()
	s.mu.Lock()
	at, ok := s.warned.get(k)
	warn := !ok || now.Sub(at) >= s.cfg.ConfigCacheTTL || now.Before(at)
	if warn {
		s.warned.add(k, now)
	}
	s.mu.Unlock()
	if warn {
		s.log.WithFields(map[string]any{"namespace": ns, "chain": strings.Join(ids, " -> ")}).Warn(msg)
	}
}

// level returns entity id's record and the limits stored for it and
// resource, from the caches or, for what they lack, by one read shared
// with every decision that wants the same records (see Ancestors).
func (s *Store) level(ctx context.Context, ns, id, resource string) (entityLevel, error) {
	keys := levelKeys(ns, id, resource)
	now := s.now()
	var missing, stale []string
	s.mu.Lock()
	for i, k := range keys {
		var expires time.Time
		var ok bool
		if i == 0 {
			var ce cachedEntity
			ce, ok = s.ents.get(strings.TrimSuffix(k, "\x00"+item.SKMeta))
			expires = ce.expires
		} else {
			var cc cachedConfig
			cc, ok = s.configs.get(k)
			expires = cc.expires
		}
		switch {
		case !ok:
			missing = append(missing, k)
		case !now.Before(expires):
			stale = append(stale, k)
		}
	}
	s.mu.Unlock()
	switch {
	case len(missing) > 0:
		// One read of what is missing, and of what is stale with it.
		for _, f := range s.loadRecords(ctx, append(missing, stale...)) {
			if err := (reader{s}).wait(ctx, f); err != nil {
				return entityLevel{}, s.ancestorsErr(err)
			}
		}
	case len(stale) > 0:
		s.loadRecords(ctx, stale) // refresh in the background; the stale entries serve meanwhile
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ce, _ := s.ents.peek(item.EntityPK(ns, id))
	lv := entityLevel{ent: ce.ent, ok: ce.ok}
	limits, _ := s.configs.peek(keys[1])
	if len(limits.limits) == 0 {
		limits, _ = s.configs.peek(keys[2])
	}
	lv.limits = namedLimits(limits.limits)
	return lv, nil
}

// ancestorsErr is the error of a walk whose read failed: contention
// (its budget ended on a read others started, or a read that panicked)
// wraps cascade.ErrContended and is counted; anything else is DynamoDB's.
func (s *Store) ancestorsErr(err error) error {
	if errors.Is(err, errContended) {
		s.obs.Contended(ContendedRead)
		return fmt.Errorf("dynamo: ancestors: entity records not read within the budget: %w", cascade.ErrContended)
	}
	return fmt.Errorf("dynamo: ancestors: %w", err)
}

// namedLimits returns m sorted by name (nil when m is empty).
func namedLimits(m map[string]tokenbucket.Limit) []cascade.NamedLimit {
	if len(m) == 0 {
		return nil
	}
	out := make([]cascade.NamedLimit, 0, len(m))
	for name, l := range m {
		out = append(out, cascade.NamedLimit{Name: name, Bucket: l})
	}
	slices.SortFunc(out, func(a, b cascade.NamedLimit) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// EntityOf decodes an entity record (ok false when item is empty: no
// record).
func EntityOf(it map[string]types.AttributeValue) (Entity, bool) {
	if len(it) == 0 {
		return Entity{}, false
	}
	return Entity{Namespace: item.GetS(it, item.AttrNamespace), ID: item.GetS(it, "id"), Parent: item.GetS(it, item.AttrParent), Cascade: item.GetBool(it, item.AttrCascade)}, true
}

// Entity is a stored entity record: an id with an optional parent, and
// whether debits of the entity cascade to its parents.
type Entity struct {
	// Namespace is the entity's namespace; empty is the store's
	// (Config.Namespace).
	Namespace string
	ID        string
	Parent    string
	Cascade   bool
}

// cachedEntity is an entity record as the entity cache holds it: whether
// it exists, and until when it is trusted.
type cachedEntity struct {
	expires time.Time
	ent     Entity
	ok      bool // the record exists
}

// RequestForm reports whether id is how descriptors.EscapeValue writes
// some request value, and otherwise returns the form that names the value
// id most likely means: id's %XX sequences decoded where they are well
// formed, escaped again.
func RequestForm(id string) (string, bool) {
	raw := make([]byte, 0, len(id))
	for i := 0; i < len(id); i++ {
		if id[i] == '%' && i+2 < len(id) && hexDigit(id[i+1]) >= 0 && hexDigit(id[i+2]) >= 0 {
			raw = append(raw, byte(hexDigit(id[i+1])<<4|hexDigit(id[i+2])))
			i += 2
			continue
		}
		raw = append(raw, id[i])
	}
	want := descriptors.EscapeValue(string(raw))
	return want, want == id
}

// hexDigit returns the value of a hex digit, or -1.
func hexDigit(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	}
	return -1
}
