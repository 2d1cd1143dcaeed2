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
// (its one entry LeaseKey=token, with the request's actual cost as its
// hits) instead of deciding that descriptor.
func WithAdjuster(a *adjust.Adjuster) Option { return func(s *Service) { s.adjust = a } }

// leaseOf returns the token of a settling descriptor: one entry, keyed
// LeaseKey.
func leaseOf(es []descriptors.Entry) (string, bool) {
	if len(es) == 1 && es[0].Key == LeaseKey {
		return es[0].Value, true
	}
	return "", false
}

// settleLeases settles the lease of every settling descriptor with the
// hits it reports (its own hits_addend) as the actual cost of each of the
// lease's limits. A
// settlement never refuses: its status stays OK whatever the outcome,
// which the adjuster counts (and retries when the store did not answer).
func (s *Service) settleLeases(ctx context.Context, items []item) {
	for i := range items {
		a := &items[i].asked
		if !a.settles {
			continue
		}
		l, err := s.adjust.Open(metrics.PathStreamEnd, a.entries[0].Value)
		if err != nil {
			continue
		}
		// The cost is the descriptor's own hits_addend; without one the
		// call reports no cost, and the estimate stands.
		hits, known := a.hits, a.own && !a.negative
		// A cost received is settled even if Envoy stops waiting for the
		// answer: the settlement has a budget of its own.
		_, err = s.adjust.Settle(context.WithoutCancel(ctx), metrics.PathStreamEnd, l, func(string) (uint64, bool) { return hits, known })
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
	names := adjustedNames(cfg, domain, items, len(plan.Debits))
	token, ok, err := s.adjust.Issue(domain, plan.Debits, dec.Statuses, names)
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

// adjustedNames returns, for each of the plan's n debits, the name of the
// adjustment that settles it, "" for none: a configured level's limits as
// the configuration selects them (by name or by the rule's path), a stored
// ancestor's by name. The debits are walked in the order plan made them.
func adjustedNames(cfg *descriptors.Config, domain string, items []item, n int) []string {
	names := make([]string, n)
	for i := range items {
		it := &items[i]
		if !it.applies() || it.rule.override {
			continue
		}
		k := it.decided.first
		for ti := range it.rule.tiers {
			t := &it.rule.tiers[ti]
			for _, l := range t.limits {
				if l.Deny {
					continue
				}
				if k >= n {
					return names
				}
				switch {
				case t.rule != nil:
					if a, ok := cfg.AdjustmentFor(t.rule, l.ID); ok {
						names[k] = a.Limit
					}
				case ti > 0: // a stored ancestor
					if a, ok := cfg.AdjustmentNamed(domain, l.ID); ok {
						names[k] = a.Limit
					}
				}
				k++
			}
		}
	}
	return names
}
