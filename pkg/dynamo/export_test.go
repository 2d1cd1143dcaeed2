package dynamo

import (
	"context"
	"time"

	"github.com/dynalimit/dynalimit/pkg/cascade"
)

// WithGiveBackLimits sets, for a test, how long a pending give-back is
// retried and how many are kept (GiveBackMaxAge, GiveBackMaxPending).
func WithGiveBackLimits(maxAge time.Duration, maxPending int) Option {
	return func(s *Store) { s.gb.maxAge, s.gb.max = maxAge, maxPending }
}

// MergeShards halves the shard count of key's bucket from n as an idle
// bucket's writes would have it (merge), for a test.
func (s *Store) MergeShards(ctx context.Context, key cascade.Key, n int) error {
	return sharder{s}.merge(ctx, s.bucketsOf(&cascade.Plan{Debits: []cascade.Debit{{Key: key}}})[0], n)
}

// DoubleShards doubles the shard count of key's bucket from n as a hot
// bucket's writes would have it (double), for a test.
func (s *Store) DoubleShards(ctx context.Context, key cascade.Key, n int) error {
	return s.double(ctx, s.bucketsOf(&cascade.Plan{Debits: []cascade.Debit{{Key: key}}})[0], n, resizeBudget)
}

// ClassifyForTest is classify of an error of a call named "test".
func ClassifyForTest(err error) error { return Classify("test", err) }

// MarkCrowded makes key's bucket hot and shared with other writers, as
// the store finds it when its batches carry several decisions and its
// writes find other replicas' decisions on a shard (pace.go), for a
// heatWindow; and asked by this replica as fast as its limit refills
// (demand.Asks), enough for a home by rank.
func (s *Store) MarkCrowded(key cascade.Key) {
	base := s.baseOf(key)
	c := cacher{s}
	c.heat(base)
	s.mu.Lock()
	c.markLocked(s.shared, base)
	s.mu.Unlock()
	s.asks.Hold(base, 1, s.nowMs(), s.nowMs()+heatWindow.Milliseconds())
}
