package degrade

import "github.com/dynalimit/dynalimit/pkg/cascade"

// DecidedLocally reports whether the plans that debit the item k are
// decided on this replica now: the shared store failed k and k has not
// gone back to it (its debt repaid). The operator's bucket show asks it of
// each level of a chain, through the admin API of the serving replica.
func (s *Store) DecidedLocally(k cascade.Key) bool {
	if s.tracked.Load() == 0 {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	it := s.items[k]
	return it != nil && it.degraded
}
