package service

import (
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// slotsConfig has deny limits (requests_per_unit: 0) between limits that
// debit: first in a chain's own tier, in the middle of its top tier, and in
// the middle of a flat rule.
const slotsConfig = `
domain: slots
descriptors:
  - key: tenant
    entity: true
    limits:
      - {name: t1, unit: minute, requests_per_unit: 30}
      - {name: tdeny, unit: minute, requests_per_unit: 0}
      - {name: t2, unit: hour, requests_per_unit: 40}
    descriptors:
      - key: project
        entity: true
        limits:
          - {name: p1, unit: minute, requests_per_unit: 50}
        descriptors:
          - key: api_key
            entity: true
            cascade: true
            limits:
              - {name: kdeny, unit: hour, requests_per_unit: 0}
              - {name: k1, unit: minute, requests_per_unit: 60}
              - {name: k2, unit: hour, requests_per_unit: 70}
  - key: user
    limits:
      - {name: u1, unit: minute, requests_per_unit: 80}
      - {name: udeny, unit: day, requests_per_unit: 0}
      - {name: u2, unit: hour, requests_per_unit: 90}
  - key: org
    limits:
      - {name: o1, unit: minute, requests_per_unit: 100}
      - {name: o2, unit: hour, requests_per_unit: 110}
`

// slotsItems plans req on slotsConfig as decide does, up to the plan.
func slotsItems(t *testing.T, req *pb.RateLimitRequest) ([]item, cascade.Plan) {
	t.Helper()
	cfg := mustConfig(t, slotsConfig)
	s := New(newFakeStore(), nil)
	items, err := s.parse(req)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.resolve(cfg, req, items); err != nil {
		t.Fatal(err)
	}
	replace(items)
	if err := s.tiers(req.GetDomain(), items); err != nil {
		t.Fatal(err)
	}
	plan, _ := s.plan(items)
	return items, plan
}

// TestDebitSlotsAroundDenyLimits: each limit's debit slot names the debit
// of that limit on that tier's bucket, a deny limit has none, and every
// debit is some limit's; the decided request reads each limit's status from
// its own slot, wherever the deny limits stand.
func TestDebitSlotsAroundDenyLimits(t *testing.T) {
	t.Run("slots", testSlots)
	t.Run("refused", testSlotsRefused)
	t.Run("remaining", testSlotsRemaining)
}

var (
	slotsChain = desc("tenant", "acme", "project", "p1", "api_key", "k1")
	slotsFlat  = desc("user", "alice")
	slotsOrg   = desc("org", "o")
)

// testSlots: each limit's slot is its own debit's, for the chains' seven
// limits (past an item's few, in the request's one allocation) as for the
// others.
func testSlots(t *testing.T) {
	chain2 := desc("tenant", "acme", "project", "p2", "api_key", "k2")
	items, plan := slotsItems(t, rlReq("slots", slotsChain, slotsFlat, chain2, slotsOrg))
	if got, want := len(plan.Debits), 14; got != want {
		t.Fatalf("plan has %d debits, want %d (the limits but the deny ones)", got, want)
	}
	claimed := make([]bool, len(plan.Debits))
	places := 0 // the limits with a debit
	for i := range items {
		it := &items[i]
		p := 0
		for _, tr := range it.rule.tiers {
			for _, l := range tr.limits {
				if p >= len(it.decided.slots) {
					t.Fatalf("item %d has %d debit slots, fewer than its limits", i, len(it.decided.slots))
				}
				k := it.decided.slots[p]
				p++
				if l.Deny {
					if k != noDebit {
						t.Errorf("deny limit %s has debit slot %d, want none", l.ID, k)
					}
					continue
				}
				if k == noDebit {
					t.Fatalf("limit %s has no debit slot", l.ID)
				}
				if db := plan.Debits[k]; db.Limit != l.ID || db.Key != tr.key {
					t.Errorf("limit %s of %s reads slot %d: the debit of %s of %s", l.ID, tr.key.Entity, k, db.Limit, db.Key.Entity)
				}
				if claimed[k] {
					t.Errorf("debit slot %d is read by two limits", k)
				}
				claimed[k] = true
				places++
			}
		}
		if p != len(it.decided.slots) {
			t.Errorf("item %d has %d debit slots for %d limits", i, len(it.decided.slots), p)
		}
	}
	if places != len(plan.Debits) {
		t.Fatalf("%d limits have a debit, want one for each of the %d debits", places, len(plan.Debits))
	}
}

// testSlotsRefused: in a refund deny limits do not refuse, so the one
// status refused is its descriptor's most restrictive limit, with that
// status's retry-after, reset and bucket.
func testSlotsRefused(t *testing.T) {
	req := rlReq("slots", negative(slotsChain, 1), negative(slotsFlat, 1), negative(slotsOrg, 1))
	_, plan := slotsItems(t, req)
	for k, db := range plan.Debits {
		dec := cascade.Decision{Statuses: make([]cascade.Status, len(plan.Debits))}
		for j := range dec.Statuses {
			dec.Statuses[j] = cascade.Status{OK: true, Remaining: 1000 * tokenbucket.PerToken}
		}
		retry, reset := time.Duration(k+1)*time.Second, time.Duration(k+1)*time.Minute
		dec.Statuses[k] = cascade.Status{RetryAfter: retry, ResetAfter: reset, Bucket: db.Bucket}
		items, _ := slotsItems(t, req)
		readDecision(items, &dec)
		refused := 0
		for i := range items {
			d := &items[i].decided
			if !d.refused {
				continue
			}
			refused++
			if l := items[i].worstLimit(); l.ID != db.Limit || items[i].rule.tiers[d.worstAt].key != db.Key {
				t.Errorf("debit %d (%s) refused: descriptor %d reports limit %s", k, db.Limit, i, l.ID)
			}
			if d.retry != retry || d.reset != reset || d.bucket != db.Bucket {
				t.Errorf("debit %d (%s) refused: descriptor %d reports retry %v reset %v, want %v %v", k, db.Limit, i, d.retry, d.reset, retry, reset)
			}
		}
		if refused != 1 {
			t.Errorf("debit %d (%s) refused: %d descriptors refused, want 1", k, db.Limit, refused)
		}
	}
}

// testSlotsRemaining: the deny limits of the first two descriptors refuse
// them, and the third, planned after them, reads the remaining tokens of
// its own debits: the lowest is its most restrictive limit.
func testSlotsRemaining(t *testing.T) {
	req := rlReq("slots", slotsChain, slotsFlat, slotsOrg)
	_, plan := slotsItems(t, req)
	for k, db := range plan.Debits {
		if db.Key.Entity != "o" {
			continue
		}
		dec := cascade.Decision{Statuses: make([]cascade.Status, len(plan.Debits))}
		for j := range dec.Statuses {
			dec.Statuses[j] = cascade.Status{OK: true, Remaining: tokenbucket.Millitokens(1000+j) * tokenbucket.PerToken}
		}
		dec.Statuses[k].Remaining = 5 * tokenbucket.PerToken
		items, _ := slotsItems(t, req)
		readDecision(items, &dec)
		for i, deny := range []string{"kdeny", "udeny"} {
			it := &items[i]
			if !it.decided.refused || it.worstLimit().ID != deny || it.decided.retry != it.worstLimit().Period() {
				t.Errorf("descriptor %d: refused %v by %s after %v, want refused by %s", i, it.decided.refused, it.worstLimit().ID, it.decided.retry, deny)
			}
		}
		org := &items[2]
		if d := &org.decided; d.refused || d.remain != 5 || org.worstLimit().ID != db.Limit {
			t.Errorf("debit %d (%s) has 5 left: org reports %s with %d left (refused %v)", k, db.Limit, org.worstLimit().ID, d.remain, d.refused)
		}
	}
}
