package memstore

import (
	"strings"
	"sync"
	"unsafe"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

type bucketKey struct {
	key   cascade.Key
	limit string
}

// entry is one bucket limit. Plans lock mu (entries in ascending seq, so
// plans over overlapping buckets cannot deadlock) while they decide; the
// shard's lock is never held while waiting for mu (eviction and the sweeper
// only TryLock), so a plan may take its shard's lock while holding mu.
type entry struct {
	mu sync.Mutex
	// Guarded by mu.
	state  tokenbucket.State
	limit  tokenbucket.Limit
	stored bool  // state holds a level; false: just created, full
	dead   bool  // removed from its shard: look the key up again
	used   uint8 // decisions since the eviction hand last passed it, up to maxUsed

	// Set at creation.
	key       bucketKey
	size      int64
	seq       uint64
	transient bool // not in any shard: the shard had no room

	// Guarded by the shard's mu: the shard's list, oldest first.
	prev, next *entry
}

// level returns the level a decision starts from at nowMs for limit l. The
// entry's lock must be held.
func (e *entry) level(l tokenbucket.Limit, nowMs int64) tokenbucket.Level {
	switch {
	case !e.stored:
		return tokenbucket.New(l.Full(nowMs))
	case e.limit != l:
		return tokenbucket.New(l.Restate(e.state, e.limit, nowMs))
	}
	return tokenbucket.Stored(e.state)
}

// entryOverhead is what one bucket limit costs besides its key bytes: the
// entry and the map slot (a key of four string headers, a pointer, a control
// byte, load-factor slack).
const entryOverhead = int64(unsafe.Sizeof(entry{})) + 2*int64(unsafe.Sizeof(bucketKey{})+8+1)

func entryBytes(k *bucketKey) int64 {
	return entryOverhead + int64(len(k.key.Namespace)+len(k.key.Entity)+len(k.key.Resource)+len(k.limit))
}

// shard is one map of entries and their ring behind one lock, held only to
// look up, insert or remove. The ring is a CLOCK: hand is the next entry
// the eviction hand examines, and new entries go just behind it, so that
// the hand reaches them last. Fields other than mu are guarded by mu.
type shard struct {
	mu    sync.Mutex
	m     map[bucketKey]*entry
	ring  entry  // sentinel of the ring (skipped by the hand)
	hand  *entry // the eviction hand: an entry of the ring, or &ring
	n     int
	bytes int64
	_     [64]byte // keep neighbouring shards' locks off one cache line
}

func (sh *shard) init() {
	sh.m = make(map[bucketKey]*entry)
	sh.ring.next, sh.ring.prev = &sh.ring, &sh.ring
	sh.hand = &sh.ring
}

func (sh *shard) insert(e *entry) {
	sh.m[e.key] = e
	sh.n++
	sh.bytes += e.size
	sh.link(e)
}

// remove drops e from the shard; e's lock must be held too.
func (sh *shard) remove(e *entry) {
	delete(sh.m, e.key)
	sh.n--
	sh.bytes -= e.size
	sh.unlink(e)
	e.dead = true
}

// advance returns the entry under the hand and moves the hand past it, or
// nil if the shard is empty.
func (sh *shard) advance() *entry {
	e := sh.hand
	if e == &sh.ring {
		e = e.next
		if e == &sh.ring {
			return nil
		}
	}
	sh.hand = e.next
	return e
}

// link puts e just behind the hand.
func (sh *shard) link(e *entry) {
	at := sh.hand
	e.prev, e.next = at.prev, at
	at.prev.next = e
	at.prev = e
}

func (sh *shard) unlink(e *entry) {
	if sh.hand == e {
		sh.hand = e.next
	}
	e.prev.next = e.next
	e.next.prev = e.prev
	e.prev, e.next = nil, nil
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
