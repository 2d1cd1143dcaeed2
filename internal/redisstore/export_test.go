package redisstore

import (
	"context"

	"github.com/dynalimit/dynalimit/pkg/cascade"
)

// Exported for the package's tests.
var (
	SlotOf = slotOf
	Crc16  = crc16
)

// SkewClock shifts the store's estimate of Redis's clock by ms.
func (s *Store) SkewClock(ms int64) { s.skewMs.Add(ms) }

// EntityKey is the key of an entity record.
func (s *Store) EntityKey(ns, id string) string { return s.keys.entity(ns, id) }

// Resolve is the stored limits' resolution of a plan's debits.
func (s *Store) Resolve(ctx context.Context, debits []cascade.Debit) ([]cascade.Debit, error) {
	return s.resolve(ctx, debits)
}

// SetMaxQueue sets the bound on a lane's queue until the test ends.
func SetMaxQueue(t interface{ Cleanup(func()) }, n int) {
	old := maxQueue
	maxQueue = n
	t.Cleanup(func() { maxQueue = old })
}

// NamespaceOfKey is the namespace a key is in.
var NamespaceOfKey = namespaceOfKey

// RegistryKey is the namespace registry's key.
const RegistryKey = registryKey

// SlotParts is the number of parts debits are decided in (one per slot on
// a cluster).
func (s *Store) SlotParts(ctx context.Context, debits []cascade.Debit) (int, error) {
	parts, err := s.slotParts(ctx, debits, nil)
	return len(parts), err
}

// RootOf is the root of entity id's chain in namespace ns.
func (s *Store) RootOf(ctx context.Context, ns, id string) (string, error) {
	return s.chains.rootOf(ctx, ns, id)
}
