package dynamo

import "time"

// WithGiveBackLimits sets, for a test, how long a pending give-back is
// retried and how many are kept (GiveBackMaxAge, GiveBackMaxPending).
func WithGiveBackLimits(maxAge time.Duration, maxPending int) Option {
	return func(s *Store) { s.gb.maxAge, s.gb.max = maxAge, maxPending }
}
