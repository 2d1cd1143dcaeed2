package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// MaxReplicaID is the longest replica id a heartbeat accepts.
const MaxReplicaID = cascade.MaxReplica

// beatScript records a replica's heartbeat in the namespace's fleet set
// (scored by when it expires, at Redis's clock), drops the expired ones,
// and counts the live.
var beatScript = rueidis.NewLuaScript(beatSource)

const beatSource = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('PEXPIRE', KEYS[1], ttl + 86400000)
return redis.call('ZCARD', KEYS[1])
`

// Heartbeat records replica id alive for ttl and returns how many
// replicas are (degrade.Heart). Expired replicas are dropped by the same
// call, so it names none back.
func (s *Store) Heartbeat(ctx context.Context, id string, ttl time.Duration, _ []string) (live int, expired []string, err error) {
	if !validID(id) {
		return 0, nil, fmt.Errorf("redisstore: heartbeat: replica id %q: 1 to %d of [A-Za-z0-9._-]: %w", id, MaxReplicaID, cascade.ErrInvalid)
	}
	c, err := s.conn()
	if err != nil {
		return 0, nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	n, err := beatScript.Exec(cctx, c, []string{s.keys.fleet()}, []string{id, strconv.FormatInt(ttl.Milliseconds(), 10)}).AsInt64()
	if err != nil {
		return 0, nil, classify(err)
	}
	return int(n), nil, nil
}

func validID(id string) bool {
	r := cascade.Repayment{Replica: id, Stamp: 1}
	return r.Validate() == nil
}

// seen is what the store last saw of the buckets it decided: per bucket
// limit, its level and when, and per item when it last refused.
// Bounded: past maxSeen entries it starts again empty.
type seen struct {
	mu      sync.Mutex
	levels  map[seenKey]seenLevel
	refused map[cascade.Key]int64 // unix ms
}

type seenKey struct {
	key   cascade.Key
	limit string
}

type seenLevel struct {
	state tokenbucket.State
	atMs  int64
}

// maxSeen bounds the levels remembered.
const maxSeen = 1 << 16

// refusalWindow is how long a refusal is told (LastSeen).
const refusalWindow = time.Second

// record remembers the levels a decision left and its refusals.
func (sn *seen) record(debits []cascade.Debit, slot []int, levels []tokenbucket.Level, dec *cascade.Decision, nowMs int64) {
	sn.mu.Lock()
	defer sn.mu.Unlock()
	if sn.levels == nil || len(sn.levels) >= maxSeen {
		sn.levels = make(map[seenKey]seenLevel)
		sn.refused = make(map[cascade.Key]int64)
	}
	for i := range debits {
		d := &debits[i]
		sn.levels[seenKey{d.Key, d.Limit}] = seenLevel{state: levels[slot[i]].State(), atMs: nowMs}
		if i < len(dec.Statuses) && !dec.Statuses[i].OK && d.Role == cascade.Enforce {
			sn.refused[d.Key] = nowMs
		}
	}
}

// LastSeen returns the tokens d's bucket held when this store last saw it,
// refilled to now, and whether its item refused within the last second
// (degrade.Seer).
func (s *Store) LastSeen(d *cascade.Debit) (tokens tokenbucket.Millitokens, ok, refused bool) {
	now := s.estimate()
	s.seen.mu.Lock()
	l, ok := s.seen.levels[seenKey{d.Key, d.Limit}]
	r, rok := s.seen.refused[d.Key]
	s.seen.mu.Unlock()
	refused = rok && now-r < refusalWindow.Milliseconds()
	if !ok {
		return 0, false, refused
	}
	return d.Bucket.Tokens(l.state, now), true, refused
}
