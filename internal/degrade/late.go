package degrade

import "time"

// firstProbe is how soon an item that degrades now is first tried again:
// at once while this process runs late (Config.Late: its own CPU is
// saturated, so the call that failed most likely waited in this process,
// not in the shared store, which is probably answering); after
// Config.Probe otherwise.
func (s *Store) firstProbe() time.Duration {
	if s.cfg.Late != nil && s.cfg.Late() {
		return 0
	}
	return s.cfg.Probe
}
