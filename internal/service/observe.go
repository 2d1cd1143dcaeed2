package service

import (
	"math"
	"strings"
	"time"

	"github.com/dynalimit/dynalimit/internal/metrics"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// observe records the decision's metrics.
func (s *Service) observe(known bool, domain string, items []item, over bool, start time.Time) {
	if s.metrics == nil {
		return
	}
	for i := range items {
		it := &items[i]
		a, d := &it.asked, &it.decided
		if !it.applies() || a.negative || d.worst < 0 {
			continue
		}
		h := metrics.RuleHits{Total: a.hits}
		if d.refused && it.hierarchical() {
			s.metrics.HierarchyRefusal(it.rule.tiers[d.worstAt].depth)
		}
		if d.violated {
			h.OverLimit = a.hits
			if d.role == cascade.Advisory {
				h.ShadowMode = a.hits
			}
		} else {
			h.WithinLimit = a.hits
			h.NearLimit = s.nearHits(it)
		}
		s.metrics.ObserveRule(metricKey(domain, it), h)
		if it.rule.match.Rule != nil && it.rule.match.Rule.Priced && (a.reported || !d.violated) {
			s.metrics.MoneyCharged(domain, s.resourceLabel(domain, a), uint64(a.money/tokenbucket.PerToken))
		}
	}
	s.metrics.ObserveDecision(domainLabel(known, domain), over, s.now().Sub(start))
}

// nearHits returns how many of an admitted item's hits landed above the
// near-limit threshold of its most restrictive limit.
func (s *Service) nearHits(it *item) uint64 {
	l := it.worstLimit()
	capacity := int64(l.Bucket.Capacity / tokenbucket.PerToken)
	threshold := int64(math.Floor(float64(capacity) * s.nearRatio))
	used := capacity - it.decided.remain
	if used <= threshold {
		return 0
	}
	return min(it.asked.hits, uint64(used-threshold))
}

// metricKey returns the item's rule key: the match's, or for an override on
// an unmatched descriptor the domain and the entry keys (never values).
func metricKey(domain string, it *item) string {
	if it.rule.matched {
		return it.rule.match.MetricKey
	}
	var b strings.Builder
	b.WriteString(domain)
	for _, e := range it.asked.entries {
		b.WriteByte('.')
		b.WriteString(e.Key)
	}
	return b.String()
}

// domainLabel is the domain label of a decision: the domain when the
// configuration knows it, else metrics.UnknownDomain (request text never
// becomes a label).
func domainLabel(known bool, domain string) string {
	if known {
		return domain
	}
	return metrics.UnknownDomain
}

// resourceLabel is the resource label of a priced item: the resource when
// its domain's prices list it, else metrics.OtherResource.
func (s *Service) resourceLabel(domain string, a *asked) string {
	pt := s.config().Prices(domain)
	if pt == nil {
		return metrics.OtherResource
	}
	for _, e := range a.entries {
		if e.Key == pt.ResourceKey {
			if _, ok := pt.Prices[e.Value]; ok {
				return e.Value
			}
			break
		}
	}
	return metrics.OtherResource
}
