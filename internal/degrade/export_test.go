package degrade

import "github.com/dynalimit/dynalimit/pkg/cascade"

// ShareOf is this replica's share of d's limit now, from 0 to 1 (shareOf).
func (s *Store) ShareOf(d *cascade.Debit) float64 {
	return float64(s.shareOf(d, s.share())) / float64(whole)
}

// Slack is how far over 1 the shares of a fleet of n may add up.
func Slack(n int) float64 { return float64(n-1) / float64(floorParts*n) }
