package admintest

import (
	"testing"

	"github.com/dynalimit/dynalimit/internal/admin"
)

func testEntities(t *testing.T, r *runner) {
	sc := []string{"-entity", "suite-e", "-resource", "suite-r"}
	set := func(specs ...string) []string { return append(append([]string{"limits", "set"}, sc...), specs...) }
	get := append([]string{"limits", "get"}, sc...)
	del := func(names ...string) []string { return append(append([]string{"limits", "delete"}, sc...), names...) }

	r.fails(get, admin.ErrNotFound, "no limits stored in namespace "+r.ns)
	r.ok(set("rpm:10/min", "tpm:1000/min:2000"), `entity "suite-e" resource "suite-r": set rpm:10/min tpm:1000/min:2000`)
	r.ok(set("rpm:20/min"), "set rpm:20/min")
	r.ok(get, `entity "suite-e" resource "suite-r": rpm:20/min tpm:1000/min:2000`+"\n")
	r.ok(del("tpm", "nope"), "deleted tpm", "no limit named nope was stored")
	r.ok(get, ": rpm:20/min\n")
	r.ok(del("nope"), "no limit named nope stored, nothing to delete")
	r.ok(del(), "deleted all limits (rpm:20/min)")
	r.fails(get, admin.ErrNotFound)
	r.ok(del(), "no limits stored, nothing to delete")
	r.ok([]string{"limits", "set", "-system", "rpd:5/day"}, "system: set rpd:5/day")
	r.ok([]string{"limits", "get", "-system"}, "system: rpd:5/day")
	r.ok([]string{"limits", "set", "-resource", "suite-r", "rps:2/sec"}, `resource "suite-r": set rps:2/sec`)

	r.ok([]string{"entity", "create", "suite-acme", "-cascade"}, `entity "suite-acme" parent "" cascade true`)
	r.ok([]string{"entity", "create", "suite-key", "-parent", "suite-acme"}, `entity "suite-key" parent "suite-acme" cascade false`)
	r.ok([]string{"limits", "set", "-entity", "suite-acme", "-resource", "suite-r", "rpy:10/day"})
	r.ok([]string{"limits", "set", "-entity", "suite-acme", "rpm:100/min"})
	r.ok([]string{"entity", "show", "suite-acme"}, `entity "suite-acme" parent "" cascade true`, `child "suite-key"`, `chain "suite-acme"`, `level "suite-acme" cascade true default: rpm:100/min`)
	out := r.ok([]string{"entity", "show", "suite-key", "-resource", "suite-r"},
		`entity "suite-key" parent "suite-acme" cascade false`, `chain "suite-key" -> "suite-acme"`,
		`level "suite-key" cascade false: no limits stored`, `level "suite-acme" cascade true resource "suite-r": rpy:10/day`)
	if r.st.Stores.Has(admin.JobBuckets) {
		// Each level with stored limits is followed by its bucket.
		if want := `bucket "suite-acme" resource "suite-r": rpy 10 of 10 left`; !contains(out, want) {
			t.Errorf("entity show suite-key -resource suite-r = %q, want %q: the store keeps buckets", out, want)
		}
	}
	r.fails([]string{"entity", "create", "suite-acme", "-parent", "suite-key"}, errAny, "cycle")
	r.ok([]string{"entity", "show", "suite-acme"}, `entity "suite-acme" parent "" cascade true`)
	r.fails([]string{"entity", "show", "suite-nobody"}, admin.ErrNotFound, `entity "suite-nobody" does not exist in namespace `+r.ns)
}
