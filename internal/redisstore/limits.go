package redisstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/redis/rueidis"

	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// Stored limits: a hash per scope, each field a limit's name and its value
// the limit's shape. A decision takes, for each debit, the limit of its
// name stored at the most specific scope of its item (resolve.go).

// Scope is where limits are stored: the system, a resource, an entity (its
// default for every resource), or an entity and a resource, in Namespace
// (empty: the store's). The operator's commands check that a scope names
// one of them.
type Scope struct {
	Namespace string
	System    bool
	Entity    string
	Resource  string
}

// ErrNotFound is wrapped by the error of a read of a record that does not
// exist: an entity, or limits at a scope that stores none.
var ErrNotFound = errors.New("redisstore: not found")

// nsOr is ns, or the store's namespace when empty.
func (s *Store) nsOr(ns string) string {
	if ns == "" {
		return s.cfg.Namespace
	}
	return ns
}

// Limits returns the limits stored at sc (an error wrapping ErrNotFound
// when none are).
func (s *Store) Limits(ctx context.Context, sc Scope) (map[string]tokenbucket.Limit, error) {
	m, err := s.hgetall(ctx, s.keys.limits(s.nsOr(sc.Namespace), sc))
	if err != nil {
		return nil, err
	}
	l := decodeLimits(m)
	if len(l) == 0 {
		return nil, fmt.Errorf("redisstore: limits at %+v: %w", sc, ErrNotFound)
	}
	return l, nil
}

// SetLimits stores limits at sc, over those stored there of the same
// names, and returns the limits stored there before and after. This
// replica's decisions see them at once, the others' within
// Config.ConfigCacheTTL.
func (s *Store) SetLimits(ctx context.Context, sc Scope, limits map[string]tokenbucket.Limit) (before, after map[string]tokenbucket.Limit, err error) {
	if len(limits) == 0 {
		return nil, nil, errors.New("redisstore: set limits: no limits given")
	}
	c, err := s.conn()
	if err != nil {
		return nil, nil, err
	}
	key := limitsID(s.nsOr(sc.Namespace), sc)
	set := c.B().Hset().Key(s.keys.key(key)).FieldValue()
	for _, name := range slices.Sorted(maps.Keys(limits)) {
		l := limits[name]
		if err := l.Validate(); err != nil {
			return nil, nil, fmt.Errorf("redisstore: limit %q: %w", name, err)
		}
		set = set.FieldValue(name, shape(l))
	}
	return s.writeLimits(ctx, key, set.Build())
}

// DeleteLimits deletes the named limits at sc, all of them when none is
// named, and returns the limits stored there before and after. A scope
// that stores none, or a name it does not store, is an error wrapping
// ErrNotFound, and nothing is deleted.
func (s *Store) DeleteLimits(ctx context.Context, sc Scope, names ...string) (before, after map[string]tokenbucket.Limit, err error) {
	before, err = s.Limits(ctx, sc)
	if err != nil {
		return nil, nil, err
	}
	for _, n := range names {
		if _, ok := before[n]; !ok {
			return nil, nil, fmt.Errorf("redisstore: delete limit %q at %+v: %w", n, sc, ErrNotFound)
		}
	}
	c, err := s.conn()
	if err != nil {
		return nil, nil, err
	}
	key := limitsID(s.nsOr(sc.Namespace), sc)
	del := c.B().Del().Key(s.keys.key(key)).Build()
	if len(names) > 0 {
		del = c.B().Hdel().Key(s.keys.key(key)).Field(names...).Build()
	}
	return s.writeLimits(ctx, key, del)
}

// writeLimits runs write on the limits hash key between two reads of it,
// in one transaction, and forgets what this replica cached of it.
func (s *Store) writeLimits(ctx context.Context, id recordID, write rueidis.Completed) (before, after map[string]tokenbucket.Limit, err error) {
	c, err := s.conn()
	if err != nil {
		return nil, nil, err
	}
	cctx, cancel := s.callCtx(ctx)
	defer cancel()
	key := s.keys.key(id)
	rs := c.DoMulti(cctx, c.B().Multi().Build(), c.B().Hgetall().Key(key).Build(), write, c.B().Hgetall().Key(key).Build(), c.B().Exec().Build())
	s.cache.forget(id)
	res, err := rs[len(rs)-1].ToArray()
	if err != nil {
		return nil, nil, classify(err)
	}
	if len(res) != 3 {
		return nil, nil, fmt.Errorf("%w: %d answers of a limits write", errReply, len(res))
	}
	var m [2]map[string]tokenbucket.Limit
	for i, r := range []int{0, 2} {
		raw, err := res[r].AsStrMap()
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %w", errReply, err)
		}
		m[i] = decodeLimits(raw)
	}
	return m[0], m[1], nil
}

// decodeLimits reads a limits hash as decisions do (limitsOf: a field
// that is not a limit's shape is not a limit); nil when it holds none.
func decodeLimits(raw map[string]string) map[string]tokenbucket.Limit {
	named := limitsOf(raw)
	if len(named) == 0 {
		return nil
	}
	out := make(map[string]tokenbucket.Limit, len(named))
	for name, l := range named {
		out[name] = l.Bucket
	}
	return out
}

// hgetall reads the hash key within the store's budget.
func (s *Store) hgetall(ctx context.Context, key string) (map[string]string, error) {
	c, err := s.conn()
	if err != nil {
		return nil, err
	}
	cctx, cancel := s.callCtx(ctx)
	defer cancel()
	m, err := c.Do(cctx, c.B().Hgetall().Key(key).Build()).AsStrMap()
	if err != nil {
		return nil, classify(err)
	}
	return m, nil
}

// callCtx is ctx bounded by the store's budget for an operator's call
// (a second at least).
func (s *Store) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, max(s.cfg.Timeout, time.Second))
}
