package service

import (
	"context"
	"errors"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/dynalimit/dynalimit/internal/adjust"
	"github.com/dynalimit/dynalimit/internal/metrics"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/descriptors"
)

// LeaseKey is the name of a lease: the field of the response's dynamic
// metadata that holds it (Envoy keeps it under envoy.filters.http.ratelimit
// and copies it into every access-log entry), and the key of the one entry
// of a descriptor that settles it at the end of a stream (Envoy's metadata
// action reads it back from there).
const LeaseKey = "dynalimit.lease"

// WithAdjuster issues a lease with every admission of a domain that
// configures adjustments, and settles a lease that a descriptor carries
// (its entry LeaseKey=token, with the request's actual cost as its hits,
// and for limits in dollars the domain's input and output token entries)
// instead of deciding that descriptor.
func WithAdjuster(a *adjust.Adjuster) Option { return func(s *Service) { s.adjust = a } }

// maxSettlingEntries is the most entries a settling descriptor has: the
// lease, and the input and output tokens of a domain with prices.
const maxSettlingEntries = 3

// leaseOf reports whether a descriptor may settle a lease: exactly one
// entry keyed LeaseKey among at most maxSettlingEntries. One of more than
// one entry settles only when the others are its domain's token counts
// (settlingCounts).
func leaseOf(es []descriptors.Entry) bool {
	if len(es) == 0 || len(es) > maxSettlingEntries {
		return false
	}
	n := 0
	for _, e := range es {
		if e.Key == LeaseKey {
			n++
		}
	}
	return n == 1
}

// settlingCounts takes the input and output token entries of each settling
// descriptor of more than one entry, with the domain's price table (a
// count that is not a whole number is an invalid request, as when
// decided); one whose other entries are not those is decided as any
// descriptor, as before leases took counts. The lease is then the one
// entry left. Without an adjuster no descriptor settles.
func (s *Service) settlingCounts(cfg *descriptors.Config, domain string, items []item) error {
	if s.adjust == nil {
		return nil
	}
	pt := cfg.Prices(domain)
	for i := range items {
		a := &items[i].asked
		if !a.settles || len(a.entries) == 1 {
			continue
		}
		if pt != nil {
			if err := takeCounts(pt, a, i); err != nil {
				return err
			}
		}
		a.settles = len(a.entries) == 1
	}
	return nil
}

// settleLeases settles the lease of every settling descriptor with what it
// reports: its own hits_addend as the actual cost of each of the lease's
// limits not in dollars, and its input and output token entries (both)
// for each limit in dollars, at the price the lease carries. A settlement
// never refuses: its status stays OK whatever the outcome, which the
// adjuster counts (and retries when the store did not answer).
func (s *Service) settleLeases(ctx context.Context, items []item) {
	for i := range items {
		a := &items[i].asked
		if !a.settles {
			continue
		}
		l, err := s.adjust.Open(metrics.PathStreamEnd, a.entries[0].Value) // the lease, its one entry left
		if err != nil {
			continue
		}
		// The count is the descriptor's own hits_addend; without one the
		// call reports no count, and the estimates not in dollars stand.
		// Without both token counts those in dollars stand.
		r := adjust.Report{Tokens: a.hits, Counted: a.own && !a.negative, In: a.in, Out: a.out, Split: a.both && !a.negative}
		// A cost received is settled even if Envoy stops waiting for the
		// answer: the settlement has a budget of its own.
		_, err = s.adjust.Settle(context.WithoutCancel(ctx), metrics.PathStreamEnd, l, func(string) adjust.Report { return r })
		if err != nil && !errors.Is(err, adjust.ErrNoCost) {
			s.log.WithError(err).Warn("settling a lease at the end of a stream")
		}
	}
}

// issueLease adds a signed lease of plan's adjusted debits to resp's
// dynamic metadata, when the domain configures adjustments.
func (s *Service) issueLease(cfg *descriptors.Config, domain string, items []item, plan *cascade.Plan, dec *cascade.Decision, resp *pb.RateLimitResponse) {
	if !cfg.HasAdjustments(domain) {
		return
	}
	terms := adjustedTerms(cfg, domain, items, len(plan.Debits))
	token, ok, err := s.adjust.Issue(domain, plan.Debits, dec.Statuses, terms)
	if err != nil {
		s.log.WithError(err).Warn("issuing a lease")
		return
	}
	if !ok {
		return
	}
	if resp.DynamicMetadata == nil {
		resp.DynamicMetadata = &structpb.Struct{Fields: make(map[string]*structpb.Value, 1)}
	}
	resp.DynamicMetadata.Fields[LeaseKey] = structpb.NewStringValue(token)
}

// adjustedTerms returns, for each of the plan's n debits, how it settles:
// the name of the adjustment that settles it, "" for none (a configured
// level's limits as the configuration selects them, by name or by the
// rule's path; a stored ancestor's by name), and for a limit in dollars the
// price its descriptor was costed at. Each limit's debit is the one at its
// slot (see plan).
func adjustedTerms(cfg *descriptors.Config, domain string, items []item, n int) []adjust.Term {
	terms := make([]adjust.Term, n)
	for i := range items {
		it := &items[i]
		if !it.applies() || it.rule.override {
			continue
		}
		p := 0 // the limit's place in tier order, and so in decided.slots
		for ti := range it.rule.tiers {
			t := &it.rule.tiers[ti]
			for _, l := range t.limits {
				k := it.decided.slots[p]
				p++
				if k == noDebit {
					continue
				}
				switch {
				case t.rule != nil:
					if a, ok := cfg.AdjustmentFor(t.rule, l.ID); ok {
						terms[k].Adjustment = a.Limit
					}
				case ti > 0: // a stored ancestor
					if a, ok := cfg.AdjustmentNamed(domain, l.ID); ok {
						terms[k].Adjustment = a.Limit
					}
				}
				if l.Money && terms[k].Adjustment != "" {
					terms[k].Money, terms[k].Price = true, it.asked.price
				}
			}
		}
	}
	return terms
}
