package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/redis/rueidis"
)

// A namespace's keys all start with its prefix (NamespacePrefix), so
// Orphans and PurgeNamespace find them with SCAN: on every master of a
// cluster (a node SCANs only its own keys), COUNT scanCount at a time,
// MATCH the prefix. There is no index by namespace: a SCAN walks the
// whole keyspace of each node, off the decisions' path but on the same
// Redis (run them off-peak on a large one).

// scanCount is the COUNT of one SCAN: the keys a page walks, and at most
// the keys one pipelined UNLINK deletes.
const scanCount = 1000

// Orphan is a namespace that has keys in Redis and no registry record.
type Orphan struct {
	Name  string
	Items int // its keys
}

// Purged is what a purge did.
type Purged struct {
	// Was is the namespace's state before the purge; empty when it was
	// not registered (an orphan: the purge registered it, as ID).
	Was string
	ID  string
	// Deleted is how many keys it deleted.
	Deleted int
}

// Orphans lists the namespaces that have keys but no registry record, by
// name, with their key counts: a SCAN of every key of the stores.
func (n *Namespaces) Orphans(ctx context.Context) ([]Orphan, error) {
	reg, err := n.List(ctx)
	if err != nil {
		return nil, err
	}
	registered := make(map[string]bool, len(reg))
	for _, ns := range reg {
		registered[ns.Name] = true
	}
	counts := map[string]int{}
	for _, st := range n.stores {
		err := scan(ctx, st, globEscape(Prefix)+"*", func(keys []string) error {
			for _, k := range keys {
				if name, ok := namespaceOfKey(k); ok && !registered[name] {
					counts[name]++
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	out := make([]Orphan, 0, len(counts))
	for name, c := range counts {
		out = append(out, Orphan{Name: name, Items: c})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Purge deletes every key of namespace name on each store (buckets,
// usage, settlement markers, entities, stored limits, audit trails),
// telling done the running count after each page, and marks it purged in
// the registry (registering it first when it was an orphan). It refuses
// a namespace the registry holds active (ErrNamespaceActive: delete it
// first). No other namespace's key is touched. It can be run again after
// a failure: it deletes what is left.
func (n *Namespaces) Purge(ctx context.Context, name string, done func(deleted int)) (Purged, error) {
	if name == "" {
		return Purged{}, errors.New("redisstore: purge: empty namespace name")
	}
	reg, _, err := n.read(ctx, name)
	registered := err == nil
	switch {
	case err != nil && !errors.Is(err, ErrNotFound):
		return Purged{}, err
	case registered && reg.State == NamespaceActive:
		return Purged{}, fmt.Errorf("redisstore: purge namespace %q: %w: delete it first ('ratelimit namespace delete %s')", name, ErrNamespaceActive, name)
	}
	p := Purged{Was: reg.State, ID: reg.ID}
	match := globEscape(NamespacePrefix(name)) + "*"
	for _, st := range n.stores {
		err := scan(ctx, st, match, func(keys []string) error {
			c, err := unlink(ctx, st, keys)
			p.Deleted += c
			if done != nil {
				done(p.Deleted)
			}
			return err
		})
		if err != nil {
			return p, err
		}
	}
	if !registered {
		// An orphan: registered now, so that the registry tells it was
		// purged and orphans no longer lists it for its audit trail.
		if reg, _, err = n.Register(ctx, name); err != nil {
			return p, err
		}
		p.ID = reg.ID
	}
	reg, raw, err := n.read(ctx, name)
	if err != nil {
		return p, err
	}
	return p, n.move(ctx, reg, raw, NamespacePurged)
}

// globEscape is s as a SCAN pattern that matches s alone.
func globEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// scan hands page each page of the keys that match pattern, on every
// master s's client reaches.
func scan(ctx context.Context, s *Store, pattern string, page func(keys []string) error) error {
	nodes, err := masters(ctx, s)
	if err != nil {
		return err
	}
	for _, n := range nodes {
		var cursor uint64
		for {
			cctx, cancel := s.callCtx(ctx)
			e, err := n.Do(cctx, n.B().Scan().Cursor(cursor).Match(pattern).Count(scanCount).Build()).AsScanEntry()
			cancel()
			if err != nil {
				return classify(err)
			}
			if len(e.Elements) > 0 {
				if err := page(e.Elements); err != nil {
					return err
				}
			}
			if cursor = e.Cursor; cursor == 0 {
				break
			}
		}
	}
	return nil
}

// masters returns a client of each master s's client reaches: the
// client itself on a single node; on a cluster (or a sentinel client
// that reads from replicas) each node that answers ROLE as a master, by
// address (a replica would list its master's keys again, and refuse to
// delete them).
func masters(ctx context.Context, s *Store) ([]rueidis.Client, error) {
	c, err := s.conn()
	if err != nil {
		return nil, err
	}
	if c.Mode() == rueidis.ClientModeStandalone {
		return []rueidis.Client{c}, nil
	}
	nodes := c.Nodes()
	addrs := make([]string, 0, len(nodes))
	for a := range nodes {
		addrs = append(addrs, a)
	}
	sort.Strings(addrs)
	var out []rueidis.Client
	for _, a := range addrs {
		n := nodes[a]
		cctx, cancel := s.callCtx(ctx)
		role, err := n.Do(cctx, n.B().Role().Build()).ToArray()
		cancel()
		if err != nil {
			return nil, fmt.Errorf("redisstore: ROLE of %s: %w", a, classify(err))
		}
		if len(role) > 0 {
			if r, _ := role[0].ToString(); r == "master" {
				out = append(out, n)
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("redisstore: none of the %d nodes is a master: %w", len(nodes), ErrUnavailable)
	}
	return out, nil
}

// unlink deletes keys in one pipelined call, one UNLINK per slot on a
// cluster (a command's keys must share one), and returns how many
// existed.
func unlink(ctx context.Context, s *Store, keys []string) (int, error) {
	c, err := s.conn()
	if err != nil {
		return 0, err
	}
	groups := [][]string{keys}
	if s.clustered() {
		at := map[uint16]int{}
		groups = groups[:0]
		for _, k := range keys {
			slot := slotOf(k)
			i, ok := at[slot]
			if !ok {
				i = len(groups)
				at[slot] = i
				groups = append(groups, nil)
			}
			groups[i] = append(groups[i], k)
		}
	}
	cmds := make(rueidis.Commands, 0, len(groups))
	for _, g := range groups {
		cmds = append(cmds, c.B().Unlink().Key(g...).Build())
	}
	cctx, cancel := s.callCtx(ctx)
	defer cancel()
	n := 0
	for _, r := range c.DoMulti(cctx, cmds...) {
		v, err := r.AsInt64()
		if err != nil {
			return n, classify(err)
		}
		n += int(v)
	}
	return n, nil
}
