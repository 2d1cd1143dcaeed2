package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/redis/rueidis"
)

// The namespace registry: one hash (registryKey), a field per registered
// namespace whose value is its record (its id, its state, when the state
// last changed). A namespace works whether it is registered or not; the
// registry tells which namespaces a fleet no longer decides for (deleted
// or purged: the service's gate reads their states), and keeps their
// lifecycle. Its writes are conditional, as on DynamoDB: a state moves
// only from the state it was read in.

// The states of a registered namespace (Namespace.State).
const (
	NamespaceActive  = "active"
	NamespaceDeleted = "deleted" // its keys are kept: recover undoes it
	NamespacePurged  = "purged"  // its keys were deleted
)

// Namespaces is the namespace registry of a store and the lifecycle of its
// namespaces: the registry on one Redis (a Split's Main), the keys of a
// namespace on each of the store's (a Split's both).
type Namespaces struct {
	reg    *Store
	stores []*Store
}

// Namespaces is the registry and the namespaces of s.
func (s *Store) Namespaces() *Namespaces { return &Namespaces{reg: s, stores: []*Store{s}} }

// Namespaces is the registry on Main and the namespaces of both stores.
func (sp *Split) Namespaces() *Namespaces {
	return &Namespaces{reg: sp.Main, stores: []*Store{sp.Main, sp.PerSecond}}
}

// ErrNamespaceActive is wrapped by the error of a purge of a namespace the
// registry holds active (delete it first).
var ErrNamespaceActive = errors.New("redisstore: namespace is active")

// Namespace is a namespace's registry record.
type Namespace struct {
	Name string
	ID   string // 12 hex digits
	// State is NamespaceActive, NamespaceDeleted or NamespacePurged.
	State string
	// Changed is when the state last changed (zero: never since it was
	// registered).
	Changed time.Time
}

// nsRecord is a registry record as the registry's hash holds it.
type nsRecord struct {
	ID      string `json:"id"`
	State   string `json:"state"`
	Changed int64  `json:"changed,omitempty"` // unix ms
}

// namespaceOf decodes the record raw of name.
func namespaceOf(name, raw string) (Namespace, error) {
	var r nsRecord
	if err := json.Unmarshal([]byte(raw), &r); err != nil {
		return Namespace{}, fmt.Errorf("%w: namespace %q record %q: %w", errReply, name, raw, err)
	}
	ns := Namespace{Name: name, ID: r.ID, State: r.State}
	if ns.State == "" {
		ns.State = NamespaceActive
	}
	if r.Changed > 0 {
		ns.Changed = time.UnixMilli(r.Changed)
	}
	return ns, nil
}

// encode is ns's record as the registry holds it.
func (ns Namespace) encode() string {
	r := nsRecord{ID: ns.ID, State: ns.State}
	if !ns.Changed.IsZero() {
		r.Changed = ns.Changed.UnixMilli()
	}
	b, _ := json.Marshal(r) // strings and a number: never fails
	return string(b)
}

// Register registers name (idempotent) and returns its record,
// and whether this call registered it (false: it was already).
func (n *Namespaces) Register(ctx context.Context, name string) (Namespace, bool, error) {
	if name == "" {
		return Namespace{}, false, errors.New("redisstore: namespace: empty name")
	}
	var rb [6]byte
	_, _ = rand.Read(rb[:])
	ns := Namespace{Name: name, ID: hex.EncodeToString(rb[:]), State: NamespaceActive}
	c, err := n.reg.conn()
	if err != nil {
		return Namespace{}, false, err
	}
	cctx, cancel := n.reg.callCtx(ctx)
	defer cancel()
	set, err := c.Do(cctx, c.B().Hsetnx().Key(registryKey).Field(name).Value(ns.encode()).Build()).AsBool()
	if err != nil {
		return Namespace{}, false, classify(err)
	}
	if !set {
		ns, err := n.Get(ctx, name)
		return ns, false, err
	}
	return ns, true, nil
}

// List lists the registered namespaces by name.
func (n *Namespaces) List(ctx context.Context) ([]Namespace, error) {
	raw, err := n.reg.hgetall(ctx, registryKey)
	if err != nil {
		return nil, err
	}
	out := make([]Namespace, 0, len(raw))
	for name, v := range raw {
		ns, err := namespaceOf(name, v)
		if err != nil {
			return nil, err
		}
		out = append(out, ns)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Get returns the registry record of name, an error wrapping
// ErrNotFound when it is not registered.
func (n *Namespaces) Get(ctx context.Context, name string) (Namespace, error) {
	ns, _, err := n.read(ctx, name)
	return ns, err
}

// read returns the registry record of name and its raw value.
func (n *Namespaces) read(ctx context.Context, name string) (Namespace, string, error) {
	c, err := n.reg.conn()
	if err != nil {
		return Namespace{}, "", err
	}
	cctx, cancel := n.reg.callCtx(ctx)
	defer cancel()
	raw, err := c.Do(cctx, c.B().Hget().Key(registryKey).Field(name).Build()).ToString()
	if rueidis.IsRedisNil(err) {
		return Namespace{}, "", fmt.Errorf("redisstore: namespace %q is not registered: %w", name, ErrNotFound)
	}
	if err != nil {
		return Namespace{}, "", classify(err)
	}
	ns, err := namespaceOf(name, raw)
	return ns, raw, err
}

// NamespaceStates reads the registry records of names in one call and
// returns the state of each registered one; a name without a record is
// absent. The service's gate reads it (dadmin.DeletedNamespaces).
func (n *Namespaces) NamespaceStates(ctx context.Context, names []string) (map[string]string, error) {
	out := make(map[string]string, len(names))
	if len(names) == 0 {
		return out, nil
	}
	c, err := n.reg.conn()
	if err != nil {
		return nil, err
	}
	cctx, cancel := n.reg.callCtx(ctx)
	defer cancel()
	vals, err := c.Do(cctx, c.B().Hmget().Key(registryKey).Field(names...).Build()).ToArray()
	if err != nil {
		return nil, classify(err)
	}
	for i, v := range vals {
		raw, err := v.ToString()
		if rueidis.IsRedisNil(err) || i >= len(names) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%w: namespace %q: %w", errReply, names[i], err)
		}
		ns, err := namespaceOf(names[i], raw)
		if err != nil {
			return nil, err
		}
		out[names[i]] = ns.State
	}
	return out, nil
}

// Delete soft-deletes a registered active namespace: its state
// becomes deleted, its keys stay (Recover undoes it). It returns
// the record as it was, and false when the namespace was not active
// (nothing written); an error wrapping ErrNotFound when it is not
// registered.
func (n *Namespaces) Delete(ctx context.Context, name string) (Namespace, bool, error) {
	return n.change(ctx, name, NamespaceDeleted, NamespaceActive)
}

// Recover makes a deleted or purged namespace active again. It
// returns the record as it was, and false when it was already active.
func (n *Namespaces) Recover(ctx context.Context, name string) (Namespace, bool, error) {
	return n.change(ctx, name, NamespaceActive, NamespaceDeleted, NamespacePurged)
}

// change moves name's record to state to when it is in one of
// from; false (and nothing written) otherwise.
func (n *Namespaces) change(ctx context.Context, name, to string, from ...string) (Namespace, bool, error) {
	cur, raw, err := n.read(ctx, name)
	if err != nil {
		return Namespace{}, false, err
	}
	for _, f := range from {
		if cur.State == f {
			return cur, true, n.move(ctx, cur, raw, to)
		}
	}
	return cur, false, nil
}

// casScript sets field ARGV[1] of hash KEYS[1] to ARGV[3] if it holds
// ARGV[2], and answers whether it did.
var casScript = rueidis.NewLuaScript(`
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
return 1
`)

// move sets the state of cur, whose record was raw, to to, on
// the condition that the record is still raw.
func (n *Namespaces) move(ctx context.Context, cur Namespace, raw, to string) error {
	c, err := n.reg.conn()
	if err != nil {
		return err
	}
	next := cur
	next.State, next.Changed = to, n.reg.now()
	cctx, cancel := n.reg.callCtx(ctx)
	defer cancel()
	moved, err := casScript.Exec(cctx, c, []string{registryKey}, []string{cur.Name, raw, next.encode()}).AsInt64()
	if err != nil {
		return classify(err)
	}
	if moved == 0 {
		return fmt.Errorf("redisstore: namespace %q: its record changed meanwhile (it was %s): try again", cur.Name, cur.State)
	}
	return nil
}
