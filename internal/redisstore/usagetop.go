package redisstore

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/dynalimit/dynalimit/pkg/cascade"
)

// MaxWindowScans bounds the SCAN calls of one WindowUsage on each master
// (of COUNT 1000 keys each): about a million keys a master.
const MaxWindowScans = 1000

// WindowUsage returns the snapshots of every entity of namespace ns (the
// deployment's when empty) that used resource in the window of kind w
// holding at. The usage hashes are kept by entity (under its hash tag),
// not by window, so it SCANs the keyspace of every master with a pattern
// that matches the window's usage keys of resource, at most
// MaxWindowScans calls a master, and reads the hashes it finds (HGETALL,
// pipelined); complete is false when a master's scan stopped at that
// bound. Its cost is the keyspace's size, however few keys match.
func (s *Store) WindowUsage(ctx context.Context, ns, resource string, w byte, at time.Time) (snaps []Snapshot, complete bool, err error) {
	c, err := s.conn()
	if err != nil {
		return nil, false, err
	}
	if ns == "" {
		ns = s.keys.ns
	}
	start := windowStarts(w, at, at)[0]
	var head, tail strings.Builder
	writeNamespace(&head, ns)
	keyPart(&tail, resource)
	tail.WriteByte(w)
	tail.WriteString(strconv.FormatInt(start.UnixMilli(), 10))
	pattern := globEscape(head.String()) + "{*}u*" + globEscape(tail.String())
	nodes, err := masters(ctx, s)
	if err != nil {
		return nil, false, err
	}
	complete = true
	for _, n := range nodes {
		var cursor uint64
		calls := 0
		for ; calls < MaxWindowScans; calls++ {
			cctx, cancel := s.callCtx(ctx)
			e, err := n.Do(cctx, n.B().Scan().Cursor(cursor).Match(pattern).Count(scanCount).Build()).AsScanEntry()
			cancel()
			if err != nil {
				return nil, false, classify(err)
			}
			if snaps, err = readWindow(ctx, s, c, e.Elements, ns, resource, w, start, tail.String(), snaps); err != nil {
				return nil, false, err
			}
			if cursor = e.Cursor; cursor == 0 {
				break
			}
		}
		complete = complete && calls < MaxWindowScans
	}
	return snaps, complete, nil
}

// readWindow appends to snaps the usage hashes s holds of of keys that are resource's
// in the window (their key ends in tail, after the entity), read in one
// pipeline.
func readWindow(ctx context.Context, s *Store, c rueidis.Client, keys []string, ns, resource string, w byte, start time.Time, tail string, snaps []Snapshot) ([]Snapshot, error) {
	var entities []string
	cmds := make(rueidis.Commands, 0, len(keys))
	for _, k := range keys {
		entity, ok := usageEntity(k, resource, tail)
		if !ok {
			continue
		}
		entities = append(entities, entity)
		cmds = append(cmds, c.B().Hgetall().Key(k).Build())
	}
	if len(cmds) == 0 {
		return snaps, nil
	}
	cctx, cancel := s.callCtx(ctx)
	defer cancel()
	for i, res := range c.DoMulti(cctx, cmds...) {
		m, err := res.AsIntMap()
		if err != nil {
			return nil, classify(err)
		}
		if len(m) > 0 {
			snaps = append(snaps, Snapshot{Namespace: s.keys.namespace(cascade.Key{Namespace: ns}), Entity: entities[i], Resource: resource, Window: w, Start: start, Limits: m})
		}
	}
	return snaps, nil
}

// usageEntity reads the entity of a usage key of resource whose window
// part is tail's: false when the key is another's (a pattern's '*' may
// match across parts).
func usageEntity(key, resource, tail string) (string, bool) {
	_, rest, ok := strings.Cut(key, "}u") // the tag is hex: its '}' is the first
	if !ok {
		return "", false
	}
	entity, rest, ok := readPart(rest)
	if !ok {
		return "", false
	}
	res, rest, ok := readPart(rest)
	if !ok || res != resource {
		return "", false
	}
	var b strings.Builder
	keyPart(&b, res)
	return entity, b.String()+rest == tail
}

// readPart reads a part keyPart wrote at the start of s: its value and
// what follows it.
func readPart(s string) (string, string, bool) {
	n, rest, ok := strings.Cut(s, ":")
	l, err := strconv.Atoi(n)
	if !ok || err != nil || l < 0 || l > len(rest) {
		return "", "", false
	}
	return unescapePart.Replace(rest[:l]), rest[l:], true
}

// WindowUsage merges both stores' snapshots of the window: an entity's
// limits from each.
func (sp *Split) WindowUsage(ctx context.Context, ns, resource string, w byte, at time.Time) ([]Snapshot, bool, error) {
	a, okA, err := sp.Main.WindowUsage(ctx, ns, resource, w, at)
	if err != nil {
		return nil, false, err
	}
	b, okB, err := sp.PerSecond.WindowUsage(ctx, ns, resource, w, at)
	if err != nil {
		return nil, false, err
	}
	idx := map[string]int{}
	for i, s := range a {
		idx[s.Entity] = i
	}
	for _, s := range b {
		i, ok := idx[s.Entity]
		if !ok {
			a = append(a, s)
			continue
		}
		for name, v := range s.Limits {
			a[i].Limits[name] += v
		}
	}
	return a, okA && okB, nil
}
