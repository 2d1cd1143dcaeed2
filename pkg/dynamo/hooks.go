package dynamo

import (
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo/item"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// The hooks of the operator's room (pkg/dynamo/admin): it reads and
// rewrites bucket items outside the decision path, through the store's
// table handle, and tells the store what it saw and changed so that the
// store's next decisions start from the table as it is. ForgetConfig,
// ForgetEntity and KeepEntity (cache.go) do the same for stored limits and
// entity records.

// CheckOpen returns the error every call of a closed store returns (see
// Close), or nil while the store is open.
func (s *Store) CheckOpen() error {
	if s.closed.Load() {
		return errClosed
	}
	return nil
}

// ForgetBucket drops the cached image of the bucket item pk: a writer of
// bucket items outside the decision path (a reset, a top-up) calls it so
// that the store's next decision on the item reads it again rather than
// write on an image the table no longer holds.
func (s *Store) ForgetBucket(pk string) { cacher{s}.forgetImage(pk) }

// PickShard returns a shard of key's bucket chosen at random among the
// shards the store knows it has (shard 0 until it learns of more).
func (s *Store) PickShard(key cascade.Key) int {
	return s.pickShard(cacher{s}.shardCount(s.baseOf(key)))
}

// LearnBucket learns the shard count that img, an image of a shard of
// key's bucket read or written outside the decision path, carries: a
// larger count from any shard (a doubling, a pre-sharding), a smaller one
// from a shard a merge removed.
func (s *Store) LearnBucket(key cascade.Key, img *item.Image) {
	cacher{s}.learnImage(s.baseOf(key), img)
}

// StartLevel is the level a decision on the limit l stored under prefix
// starts from on img: the stored one (restated when it was written under
// another limit), or, for a limit the item does not hold, a new bucket,
// full, or empty on a shard a doubling created; true for a new bucket.
func StartLevel(img *item.Image, prefix string, l tokenbucket.Limit, now int64) (tokenbucket.Level, bool) {
	return startLevel(img, prefix, l, now)
}

// baseOf is the key under which the store keeps what it knows of key's
// bucket (its shard count, its refusals).
func (s *Store) baseOf(key cascade.Key) string {
	return s.bucketsOf(&cascade.Plan{Debits: []cascade.Debit{{Key: key}}})[0].base
}
