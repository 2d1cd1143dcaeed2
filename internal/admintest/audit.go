package admintest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/dynalimit/dynalimit/internal/admin"
)

// record is an audit record of audit list's JSON.
type record struct {
	Action, Scope, Principal, Before, After string
}

// audited lists the audit records of a scope, as "action scope before ->
// after by principal".
func (r *runner) audited(scope ...string) []string {
	r.t.Helper()
	var recs []record
	r.jsonOf(&recs, append([]string{"audit", "list"}, scope...)...)
	out := make([]string, len(recs))
	for i, rec := range recs {
		out[i] = fmt.Sprintf("%s %s %s -> %s by %s", rec.Action, rec.Scope, rec.Before, rec.After, rec.Principal)
	}
	return out
}

func testAudit(t *testing.T, r *runner) {
	if got := r.audited("-entity", "suite-e"); len(got) != 0 {
		t.Errorf("audit list before any change = %q, want none", got)
	}
	r.ok([]string{"audit", "list", "-entity", "suite-e"}, `--stderr--`+"\n"+`entity "suite-e": no audit records in namespace `+r.ns)
	var want []string // of suite-e, oldest first
	if r.st.Stores.Has(admin.JobEntities) {
		r.ok([]string{"limits", "set", "-entity", "suite-e", "-resource", "suite-r", "rpm:10/min"})
		r.ok([]string{"limits", "set", "-entity", "suite-e", "rpm:5/min"})
		r.ok([]string{"limits", "delete", "-entity", "suite-e", "-resource", "suite-r"})
		r.ok([]string{"limits", "set", "-system", "rpd:7/day"})
		want = append(want,
			`limits.set entity "suite-e" resource "suite-r"  -> rpm:10/min by `+Principal,
			`limits.set entity "suite-e"  -> rpm:5/min by `+Principal,
			`limits.delete entity "suite-e" resource "suite-r" rpm:10/min ->  by `+Principal)
		if got := r.audited("-system"); len(got) != 1 || got[0] != "limits.set system  -> rpd:7/day by "+Principal {
			t.Errorf("audit list -system = %q, want the limits set there", got)
		}
		// -resource keeps the records of that entity and resource.
		got := r.audited("-entity", "suite-e", "-resource", "suite-r")
		if strings.Join(got, "\n") != want[0]+"\n"+want[2] {
			t.Errorf("audit list -entity suite-e -resource suite-r =\n%s\nwant\n%s\n%s", strings.Join(got, "\n"), want[0], want[2])
		}
	}
	if r.st.Stores.Has(admin.JobBuckets) {
		r.consume("suite-e", 1)
		r.ok([]string{"bucket", "reset", "-entity", "suite-e", "-resource", "suite-r"})
		want = append(want, "bucket.reset")
	}
	got := r.audited("-entity", "suite-e")
	if len(got) != len(want) {
		t.Fatalf("audit list -entity suite-e =\n%s\nwant %d records:\n%s", strings.Join(got, "\n"), len(want), strings.Join(want, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) || !strings.HasSuffix(got[i], " by "+Principal) {
			t.Errorf("audit record %d = %q, want %q, by %s", i, got[i], want[i], Principal)
		}
	}
	if len(want) > 0 {
		r.ok([]string{"audit", "list", "-entity", "suite-e", "-o", "table"}, "TIME", "PRINCIPAL", "ACTION", Principal)
	}
	if r.st.Stores.Has(admin.JobNamespaces) {
		r.ok([]string{"namespace", "register", r.ns + "-a"})
		if got := r.audited("-system", "-namespace", r.ns+"-a"); len(got) != 1 || !strings.HasPrefix(got[0], "namespace.register system ") {
			t.Errorf("audit list -system of a namespace registered = %q, want its registration", got)
		}
	}
}
