package admintest

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/internal/admin"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// shown is a bucket of bucket show's JSON.
type shown struct {
	Entity   string `json:"entity"`
	Resource string `json:"resource"`
	Limits   []struct {
		Name     string  `json:"name"`
		Tokens   float64 `json:"tokens"`
		Capacity float64 `json:"capacity"`
	} `json:"limits"`
}

// reset is a bucket of bucket reset's (and topup's) JSON.
type reset struct {
	Before    shown  `json:"before"`
	Reset     bool   `json:"reset"`
	Principal string `json:"principal"`
}

// perYear is the suite's bucket limit: 10 a year, so that nothing
// measurable refills while it runs.
func perYear(t *testing.T) tokenbucket.Limit {
	l, err := tokenbucket.Rate(10, 365*24*time.Hour, 0)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// consume takes tokens of limit rpy of r's bucket through Acquire.
func (r *runner) consume(entity string, tokens int) {
	r.t.Helper()
	d := cascade.Debit{Key: cascade.Key{Namespace: r.ns, Entity: entity, Resource: "suite-r"}, Limit: "rpy", Bucket: perYear(r.t), Amount: tokenbucket.Millitokens(tokens) * tokenbucket.PerToken, Op: cascade.Consume}
	if dec, err := r.st.Acquire(r.ctx, &cascade.Plan{Debits: []cascade.Debit{d}}); err != nil || !dec.Admitted {
		r.t.Fatalf("Acquire(%d tokens of %s) = %+v, %v, want admitted", tokens, entity, dec, err)
	}
}

// jsonOf runs a command line with -o json and decodes its output into v.
func (r *runner) jsonOf(v any, args ...string) {
	r.t.Helper()
	out := r.ok(append(args, "-o", "json"))
	if err := json.Unmarshal([]byte(out), v); err != nil {
		r.t.Fatalf("%s -o json = %q: %v", strings.Join(args, " "), out, err)
	}
}

// held is what rpy of the bucket of entity holds, by bucket show.
func (r *runner) held(entity string) float64 {
	r.t.Helper()
	var got []shown
	r.jsonOf(&got, "bucket", "show", "-entity", entity, "-resource", "suite-r")
	if len(got) != 1 || len(got[0].Limits) != 1 || got[0].Limits[0].Name != "rpy" || got[0].Limits[0].Capacity != 10 {
		r.t.Fatalf("bucket show %s = %+v, want one bucket holding rpy of capacity 10", entity, got)
	}
	return got[0].Limits[0].Tokens
}

func testBuckets(t *testing.T, r *runner) {
	var fresh []shown
	r.jsonOf(&fresh, "bucket", "show", "-entity", "suite-new", "-resource", "suite-r")
	if len(fresh) != 1 || len(fresh[0].Limits) != 0 || fresh[0].Entity != "suite-new" {
		t.Errorf("bucket show of a bucket never written = %+v, want it full: no limit held", fresh)
	}
	var none []reset
	if r.jsonOf(&none, "bucket", "reset", "-entity", "suite-new", "-resource", "suite-r"); len(none) != 1 || none[0].Reset {
		t.Errorf("bucket reset of a bucket never written = %+v, want nothing reset", none)
	}
	r.consume("suite-e", 3)
	for range 2 { // a show consumes nothing
		if got := r.held("suite-e"); got != 7 {
			t.Fatalf("bucket show after 3 consumed = %v tokens, want 7", got)
		}
	}
	var done []reset
	r.jsonOf(&done, "bucket", "reset", "-entity", "suite-e", "-resource", "suite-r")
	if len(done) != 1 || !done[0].Reset || done[0].Principal != Principal || len(done[0].Before.Limits) != 1 || done[0].Before.Limits[0].Tokens != 7 {
		t.Errorf("bucket reset = %+v, want reset by %s from 7", done, Principal)
	}
	if got := r.held("suite-e"); got != 10 {
		t.Errorf("bucket show after the reset = %v tokens, want 10", got)
	}
	r.consume("suite-e", 6)
	var up reset
	r.jsonOf(&up, "bucket", "topup", "-entity", "suite-e", "-resource", "suite-r", "-limit", "rpy", "-amount", "2.5")
	if !up.Reset || up.Before.Limits[0].Tokens != 4 {
		t.Errorf("bucket topup = %+v, want a top-up from 4", up)
	}
	if got := r.held("suite-e"); got != 6.5 {
		t.Errorf("bucket show after a top-up of 2.5 = %v tokens, want 6.5", got)
	}
	r.fails([]string{"bucket", "topup", "-entity", "suite-e", "-resource", "suite-r", "-limit", "nope", "-amount", "1"}, admin.ErrNoSuchLimit,
		`bucket "suite-e" resource "suite-r" holds no limit named "nope": it holds rpy`)
	r.ok([]string{"bucket", "topup", "-entity", "suite-e", "-resource", "suite-r", "-limit", "rpy", "-amount", "100"}, "rpy topped up by 100 (was rpy 6.500 of 10), by "+Principal)
	if got := r.held("suite-e"); got != 10 {
		t.Errorf("bucket show after a top-up past capacity = %v tokens, want 10: never above capacity", got)
	}
	// A full limit answers the same on every store, with an item or not.
	full := `bucket "suite-e" resource "suite-r": rpy is full: nothing to top up`
	r.ok([]string{"bucket", "topup", "-entity", "suite-e", "-resource", "suite-r", "-limit", "rpy", "-amount", "1"}, full)
	var same reset
	if r.jsonOf(&same, "bucket", "topup", "-entity", "suite-e", "-resource", "suite-r", "-limit", "rpy", "-amount", "1"); same.Reset {
		t.Errorf("bucket topup of a full limit = %+v, want reset false", same)
	}
	r.ok([]string{"bucket", "topup", "-entity", "suite-new", "-resource", "suite-r", "-limit", "rpy", "-amount", "1"}, `bucket "suite-new" resource "suite-r": rpy is full: nothing to top up`)
	r.ok([]string{"bucket", "reset", "-entity", "suite-e", "-resource", "suite-r"}, `bucket "suite-e" resource "suite-r": reset to full on 1 shard (was rpy 10 of 10), by `+Principal)
}
