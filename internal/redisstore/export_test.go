package redisstore

import "github.com/dynalimit/dynalimit/pkg/cascade"

// Exported for the package's tests.
var (
	SlotOf = slotOf
	Crc16  = crc16
)

// BucketKey is the key of k's bucket hash in a store of namespace ns.
func BucketKey(ns string, k cascade.Key) string { return keyspace{ns: ns}.bucket(k) }

// SkewClock shifts the store's estimate of Redis's clock by ms.
func (s *Store) SkewClock(ms int64) { s.skewMs.Add(ms) }
