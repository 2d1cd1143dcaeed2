package service

import (
	"math"
	"strconv"
	"strings"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/descriptors"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// resolve matches each descriptor of a known domain and applies limit
// overrides.
func (s *Service) resolve(cfg *descriptors.Config, req *pb.RateLimitRequest, items []item) error {
	domain := req.GetDomain()
	ds := req.GetDescriptors()
	pt := cfg.Prices(domain)
	nov := 0
	for _, d := range ds {
		if d.GetLimit() != nil {
			nov++
		}
	}
	var ovs []descriptors.Limit
	if nov > 0 {
		ovs = make([]descriptors.Limit, 0, nov)
	}
	for i := range items {
		if items[i].asked.settles {
			continue // settled, not decided (lease.go)
		}
		r := &items[i].rule
		if pt != nil {
			if err := takeCounts(pt, &items[i].asked, i); err != nil {
				return err
			}
		}
		r.match, r.matched = cfg.Match(domain, items[i].asked.entries)
		if s.gone(r, ds[i].GetLimit() != nil) {
			r.matched = false // its namespace is deleted: as if no rule matched
			continue
		}
		if o := ds[i].GetLimit(); o != nil {
			l, err := overrideLimit(o)
			if err != nil {
				return invalid(reasonOverride, "service: descriptor "+strconv.Itoa(i)+": "+err.Error())
			}
			ovs = append(ovs, l)
			r.limits = ovs[len(ovs)-1 : len(ovs) : len(ovs)]
			r.override = true
			continue
		}
		if !r.matched {
			continue
		}
		rr := r.match.Rule
		if rr.Priced {
			if err := price(pt, &items[i].asked, i); err != nil {
				return err
			}
		}
		r.unlimited = rr.Unlimited
		r.limits = rr.Limits
		r.shadow = rr.ShadowMode
		r.quota = rr.QuotaMode
	}
	return nil
}

// gone reports whether the namespace gate holds the namespace of r's
// bucket deleted: the rule's, or for a limit override the deployment's.
func (s *Service) gone(r *rule, override bool) bool {
	switch {
	case s.gate == nil:
		return false
	case override:
		return s.gate.Deleted("")
	case r.matched:
		return s.gate.Deleted(r.match.Rule.Namespace)
	}
	return false
}

// overrideLimit builds the limit of a descriptor's limit override.
func overrideLimit(o *rlv3.RateLimitDescriptor_RateLimitOverride) (descriptors.Limit, error) {
	unit := descriptors.Unit(o.GetUnit())
	d := unit.Duration()
	if d == 0 {
		return descriptors.Limit{}, serviceError("limit override has no valid unit")
	}
	mult := uint32(1)
	if m := o.GetUnitMultiplier(); m != nil && m.GetValue() > 0 {
		mult = m.GetValue()
	}
	if int64(mult) > math.MaxInt64/int64(d) {
		return descriptors.Limit{}, serviceError("limit override period overflows")
	}
	rpu := uint64(o.GetRequestsPerUnit())
	var b strings.Builder
	b.WriteString("override_")
	b.WriteString(strconv.FormatUint(rpu, 10))
	b.WriteString("_per_")
	if mult != 1 {
		b.WriteString(strconv.FormatUint(uint64(mult), 10))
		b.WriteByte('_')
	}
	b.WriteString(unit.String())
	l := descriptors.Limit{
		ID:              b.String(),
		Unit:            unit,
		RequestsPerUnit: rpu,
		UnitMultiplier:  mult,
		Deny:            rpu == 0,
	}
	if rpu == 0 {
		return l, nil
	}
	bucket, err := tokenbucket.Rate(rpu, d*time.Duration(mult), 0)
	if err != nil {
		return descriptors.Limit{}, serviceError("limit override: " + err.Error())
	}
	l.Bucket = bucket
	return l, nil
}

// replace marks the items whose rule another matched rule of the request
// replaces, as envoyproxy/ratelimit does (overridden descriptors neither
// replace nor are replaced). It is linear in the request: one pass collects
// the replaced names, one marks the items.
func replace(items []item) {
	// replacers counts, per replaced name, the items that replace it; by
	// is the last of them, so that an item that names its own rule is not
	// replaced by itself alone.
	type replacer struct{ count, by int }
	var names map[string]replacer
	for i := range items {
		r := &items[i].rule
		if !r.matched || r.override {
			continue
		}
		for _, name := range r.match.Rule.Replaces {
			if names == nil {
				names = make(map[string]replacer)
			}
			// A rule that lists a name twice still replaces it once.
			if rp := names[name]; rp.count == 0 || rp.by != i {
				names[name] = replacer{count: rp.count + 1, by: i}
			}
		}
	}
	if names == nil {
		return
	}
	for i := range items {
		r := &items[i].rule
		if !r.matched || r.override || r.match.Rule.Name == "" {
			continue
		}
		if rp := names[r.match.Rule.Name]; rp.count > 1 || (rp.count == 1 && rp.by != i) {
			r.replaced = true
		}
	}
}

// plan builds the request's one plan from the items' tiers (see tiers) and
// reports whether the request is refused whatever the store says (a deny
// limit that enforces, or quota denies with no quota debit left to pass). A
// forced refusal turns every consume into a check, so that the store
// reports without debiting. Each item records the debit slot of each of its
// limits (decided.slots), which is how its statuses are read back.
func (s *Service) plan(items []item) (cascade.Plan, bool) {
	n := slotRoom(items)
	if n == 0 {
		return cascade.Plan{}, false
	}
	debits := make([]cascade.Debit, 0, n)
	enforceDeny, quotaDeny, quotaDebits := false, false, 0
	for i := range items {
		it := &items[i]
		if !it.applies() {
			continue
		}
		a, r, d := &it.asked, &it.rule, &it.decided
		switch {
		case s.shadow || it.shadowed():
			d.role = cascade.Advisory
		case r.quota && !r.override:
			d.role = cascade.Quota
		default:
			d.role = cascade.Enforce
		}
		for ti := range r.tiers {
			t := &r.tiers[ti]
			for li := range t.limits {
				l := &t.limits[li]
				if l.Deny {
					d.slots = append(d.slots, noDebit)
					if a.negative {
						continue // a refund to a deny limit changes nothing
					}
					switch d.role {
					case cascade.Enforce:
						enforceDeny = true
					case cascade.Quota:
						quotaDeny = true
					}
					continue
				}
				if d.role == cascade.Quota {
					quotaDebits++
				}
				d.slots = append(d.slots, int32(len(debits)))
				debits = append(debits, s.debit(t, l, a, d.role))
			}
		}
	}
	forced := enforceDeny || (quotaDeny && quotaDebits == 0)
	if forced {
		for i := range debits {
			if debits[i].Op == cascade.Consume {
				debits[i].Op = cascade.Check
				debits[i].Amount = 0
			}
		}
	}
	return cascade.Plan{Debits: debits}, forced
}

// slotRoom gives each applying item room for the debit slots of its tiers'
// limits: its own few when they fit, otherwise a part of one allocation for
// the request. It returns the number of limits of all the items.
func slotRoom(items []item) int {
	n, spill := 0, 0
	for i := range items {
		if it := &items[i]; it.applies() {
			m := it.rule.numLimits()
			n += m
			if m > len(it.decided.few) {
				spill += m
			}
		}
	}
	var room []int32
	if spill > 0 {
		room = make([]int32, spill)
	}
	for i := range items {
		it := &items[i]
		if !it.applies() {
			continue
		}
		d := &it.decided
		d.slots = d.few[:0]
		if m := it.rule.numLimits(); m > len(d.few) {
			d.slots, room = room[:0:m], room[m:]
		}
	}
	return n
}

// debit is the debit of limit l of tier t for what a asked, in role.
func (s *Service) debit(t *tier, l *descriptors.Limit, a *asked, role cascade.Role) cascade.Debit {
	db := cascade.Debit{
		Key:    t.key,
		Limit:  l.ID,
		Bucket: l.Bucket,
		Amount: a.amount(l),
		Role:   role,
		Depth:  uint8(t.depth),
	}
	switch {
	case a.negative:
		db.Op = cascade.Refund
	case l.Money && a.reported:
		db.Op = cascade.Charge // tokens already spent
	case db.Amount == 0:
		db.Op = cascade.Check
	case s.charges(l, a):
		db.Op = cascade.Charge
	default:
		db.Op = cascade.Consume
	}
	return db
}

// charges reports whether the hits a descriptor asked of limit l are a
// charge (cost already spent: debited even past zero, answered by whether
// they fitted) rather than a consume (all-or-nothing). A limit's charge mode
// decides when its configuration names one; otherwise a descriptor's own
// hits_addend is a charge, unless the service consumes those too
// (DESCRIPTOR_HITS_ADDEND=consume). That is how Envoy reports the cost of
// a finished stream (apply_on_stream_done with hits_addend), and how Envoy
// Gateway and Envoy AI Gateway configure usage-based limits: a request-time
// check (hits_addend 0) and a stream-end charge of the response's cost,
// which lands even when it overshoots, as it does on envoyproxy/ratelimit's
// counters. Hits from the request's hits_addend or the default of one are
// consumed.
func (s *Service) charges(l *descriptors.Limit, a *asked) bool {
	switch l.Charge {
	case descriptors.ChargePost:
		return true
	case descriptors.ChargePre:
		return false
	}
	return a.own && s.chargeDescriptorHits
}

// enforced reports whether some debit of p can refuse the request.
func enforced(p *cascade.Plan) bool {
	for i := range p.Debits {
		if p.Debits[i].Role != cascade.Advisory {
			return true
		}
	}
	return false
}

// itemKey returns the bucket item of an item's limits. Its namespace is the
// rule file's, or empty, the deployment's (the store resolves it): for a
// file without `namespace:` and for a limit the request overrides.
func itemKey(domain string, it *item) cascade.Key {
	if it.rule.matched {
		return cascade.Key{Namespace: it.rule.match.Rule.Namespace, Entity: it.rule.match.EntityID(), Resource: domain}
	}
	return cascade.Key{Entity: descriptors.Match{Entries: it.asked.entries}.EntityID(), Resource: domain}
}
