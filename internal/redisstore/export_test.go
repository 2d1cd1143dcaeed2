package redisstore

// Exported for the package's tests.
var (
	SlotOf = slotOf
	Crc16  = crc16
)

// SkewClock shifts the store's estimate of Redis's clock by ms.
func (s *Store) SkewClock(ms int64) { s.skewMs.Add(ms) }

// EntityKey is the key of an entity record.
func (s *Store) EntityKey(ns, id string) string { return s.keys.entity(ns, id) }
