package admintest

import (
	"regexp"
	"strings"
	"testing"

	"github.com/dynalimit/dynalimit/internal/admin"
)

func testNamespaces(t *testing.T, r *runner) {
	a, b, orphan := r.ns+"-a", r.ns+"-b", r.ns+"-orphan"
	out := r.ok([]string{"namespace", "register", a}, "namespace "+a+" id ")
	id := regexp.MustCompile(`id ([0-9a-f]{12})\n`).FindStringSubmatch(out)
	if id == nil {
		t.Fatalf("namespace register %s = %q, want an id of 12 hex digits", a, out)
	}
	r.ok([]string{"namespace", "register", a}, "namespace "+a+" id "+id[1]+"\n") // idempotent
	r.ok([]string{"namespace", "register", b})
	r.ok([]string{"namespace", "list"}, a+"\t"+id[1]+"\n", b+"\t")
	r.ok([]string{"namespace", "show", a}, "namespace "+a+" id "+id[1]+" state active")
	r.fails([]string{"namespace", "show", r.ns + "-nobody"}, admin.ErrNotFound, "is not registered")
	r.fails([]string{"namespace", "delete", r.ns + "-nobody"}, admin.ErrNotFound, "register it first")

	r.fails([]string{"namespace", "purge", a, "-yes"}, admin.ErrNamespaceActive, "is active: delete it first")
	r.ok([]string{"namespace", "delete", a}, "namespace "+a+" deleted by "+Principal)
	r.ok([]string{"namespace", "delete", a}, "namespace "+a+" is already deleted")
	r.ok([]string{"namespace", "show", a}, "state deleted since ")
	r.ok([]string{"namespace", "list"}, a+"\t"+id[1]+"\tdeleted ")
	r.ok([]string{"namespace", "recover", a}, "namespace "+a+" recovered by "+Principal+": active")
	r.ok([]string{"namespace", "recover", a}, "namespace "+a+" is already active")
	r.fails([]string{"namespace", "purge", a}, admin.ErrUsage, "add -yes")

	// Items in a namespace: b's (to purge) and orphan's (never
	// registered), where the store keeps items of its own.
	items := r.st.Stores.Has(admin.JobEntities)
	if items {
		r.ok([]string{"limits", "set", "-entity", "suite-e", "-namespace", b, "rpm:1/min"})
		r.ok([]string{"limits", "set", "-entity", "suite-e", "-namespace", orphan, "rpm:1/min"})
		r.ok([]string{"namespace", "orphans"}, orphan+"\t")
	}
	if out := r.ok([]string{"namespace", "orphans"}); strings.Contains(out, a+"\t") || strings.Contains(out, b+"\t") {
		t.Errorf("namespace orphans = %q, want no registered namespace in it", out)
	}
	r.ok([]string{"namespace", "delete", b})
	out = r.ok([]string{"namespace", "purge", b, "-yes"}, "namespace "+b+" purged by "+Principal+": ")
	if items && strings.Contains(out, ": 0 items deleted") {
		t.Errorf("namespace purge %s = %q, want its items deleted", b, out)
	}
	r.ok([]string{"namespace", "show", b}, "state purged")
	if items {
		r.fails([]string{"limits", "get", "-entity", "suite-e", "-namespace", b}, admin.ErrNotFound)
		r.ok([]string{"limits", "get", "-entity", "suite-e", "-namespace", orphan}, "rpm:1/min")
	}
	if r.st.Stores.Has(admin.JobAudit) {
		r.ok([]string{"namespace", "show", a}, "namespace.register by "+Principal, "namespace.delete by "+Principal, "namespace.recover by "+Principal)
	}
	// An orphan is purged as it is (it is registered purged).
	r.ok([]string{"namespace", "purge", orphan, "-yes"}, "namespace "+orphan+" purged by "+Principal)
	r.ok([]string{"namespace", "show", orphan}, "state purged")
}
