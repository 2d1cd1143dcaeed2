package admintest

import (
	"testing"
	"time"
)

// testUsageTop: usage top ranks every entity that used a resource in a
// window, from the store's own history (no entity named): by one limit or
// all added up, the first -n, other resources and windows left out.
func testUsageTop(t *testing.T, r *runner) {
	at := time.Date(2026, 11, 26, 14, 30, 0, 0, time.UTC)
	for _, u := range []struct {
		entity, resource, limit string
		hours                   int
		mt                      int64
	}{
		{"team/1", "gpt-4", "rpm", 0, 4000}, {"team/2", "gpt-4", "rpm", 0, 9000}, {"team/3", "gpt-4", "rpm", 1, 500},
		{"team/3", "gpt-4", "tpm", 1, 20000}, {"team/4", "embed", "rpm", 0, 99000}, {"team/5", "gpt-4", "rpm", 48, 99000},
	} {
		if err := r.st.AddUsage(r.ctx, r.ns, u.entity, u.resource, u.limit, at.Add(time.Duration(u.hours)*time.Hour), u.mt); err != nil {
			t.Fatalf("AddUsage(%+v) = %v", u, err)
		}
	}
	r.ok([]string{"usage", "top", "-resource", "gpt-4", "-limit", "rpm", "-at", "2026-11-26"},
		"RANK  ENTITY  TOKENS\n1     team/2  9\n2     team/1  4\n3     team/3  0.5\n")
	var got struct {
		Start     string
		Complete  bool
		Entities  int
		Consumers []struct {
			Rank        int
			Entity      string
			Millitokens int64
		}
	}
	r.jsonOf(&got, "usage", "top", "-resource", "gpt-4", "-at", "2026-11-26T12:00:00Z", "-n", "2")
	if got.Start != "2026-11-26T00:00:00Z" || !got.Complete || got.Entities != 3 || len(got.Consumers) != 2 ||
		got.Consumers[0].Entity != "team/3" || got.Consumers[0].Millitokens != 20500 || got.Consumers[1].Entity != "team/2" || got.Consumers[1].Rank != 2 {
		t.Errorf("usage top of every limit, -n 2 = %+v, want team/3 (20.5) then team/2 (9) of 3 entities, complete", got)
	}
	r.ok([]string{"usage", "top", "-resource", "gpt-4", "-window", "hourly", "-at", "2026-11-26T14:59:00Z", "-limit", "rpm"},
		"1     team/2  9\n2     team/1  4\n")
	r.ok([]string{"usage", "top", "-resource", "nothing", "-at", "2026-11-26"}, `resource "nothing": no daily usage in the window of 2026-11-26T00:00:00Z`)
	r.fails([]string{"usage", "top"}, errAny, "missing -resource")
}
