package admin_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/dynalimit/dynalimit/internal/admin"
)

// TestEmbeddedGoesToTheLocalAPI runs bucket show on the embedded store
// (BACKEND_TYPE unset: memory) without -admin_url: it asks the local
// service's admin API at DEBUG_PORT, and when none answers says in one
// line what to set, never a word about AWS.
func TestEmbeddedGoesToTheLocalAPI(t *testing.T) {
	a := newEmbeddedAPI(t)
	a.consume(t, 3)
	u, err := url.Parse(a.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"USER": "dave", "DEBUG_PORT": u.Port(), "DEBUG_HOST": "0.0.0.0"}
	out, err := run(t, env, "bucket", "show", "-entity", "generic_key=show", "-resource", "ops")
	if err != nil || !strings.Contains(out, "generic_key=show") || !strings.Contains(out, "47") {
		t.Fatalf("bucket show on the embedded store = %q, %v, want the local service's bucket holding 47", out, err)
	}
	out, err = run(t, env, "bucket", "topup", "-entity", "generic_key=show", "-resource", "ops", "-limit", "default", "-amount", "1")
	if err != nil || !strings.Contains(out, "topped up by 1 (was default 47 of 50), by dave") {
		t.Fatalf("bucket topup on the embedded store = %q, %v", out, err)
	}

	// Nothing listening: one line naming what to set.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	env["DEBUG_PORT"] = itoa(port)
	_, err = run(t, env, "bucket", "show", "-entity", "generic_key=show", "-resource", "ops")
	want := "the embedded store (BACKEND_TYPE=memory) keeps its buckets in the service's process, and no admin API answers at http://127.0.0.1:" + itoa(port) +
		": run the service with ADMIN_API=true, or set -admin_url to its debug listener"
	if err == nil || err.Error() != want {
		t.Errorf("bucket show with no service = %v, want %q", err, want)
	}

	// A service without ADMIN_API (its debug listener answers 404): the same line.
	off := newNotFound(t)
	env["DEBUG_PORT"] = off
	if _, err = run(t, env, "bucket", "reset", "-entity", "generic_key=show", "-resource", "ops"); err == nil || !strings.Contains(err.Error(), "run the service with ADMIN_API=true, or set -admin_url") {
		t.Errorf("bucket reset against a service without the admin API = %v, want it to say ADMIN_API=true and -admin_url", err)
	}

	// A DynamoDB table named: DynamoDB, as before.
	env["DYNAMODB_TABLE"] = "t"
	env["DYNAMODB_ENDPOINT"] = "http://127.0.0.1:" + itoa(port)
	if _, err = run(t, env, "bucket", "show", "-entity", "e", "-resource", "r"); err == nil || strings.Contains(err.Error(), "admin API") {
		t.Errorf("bucket show with DYNAMODB_ENDPOINT set = %v, want DynamoDB's error", err)
	}
}

// TestUnsupportedListsWhatRuns asks the embedded store's admin API for a
// command it does not run: the 501 lists the commands it does, from the
// table the API serves (bucket topup among them).
func TestUnsupportedListsWhatRuns(t *testing.T) {
	a := newEmbeddedAPI(t)
	code, body := a.call(t, "GET", "/admin/usage/list?entity=acme", nil)
	want := "usage list: the embedded store (BACKEND_TYPE=memory) does not keep usage history (it runs bucket show, bucket reset and bucket topup); use BACKEND_TYPE=dynamodb or redis"
	if code != http.StatusNotImplemented || !strings.Contains(body, want) {
		t.Errorf("GET usage/list = %d %q, want 501 %q", code, body, want)
	}
	if got := admin.RunsOn(admin.Stores{}); len(got) != 0 {
		t.Errorf("RunsOn(no jobs) = %q, want none", got)
	}
	for _, c := range admin.RunsOn(a.stores) {
		g, v, _ := strings.Cut(c, " ")
		code, _ := a.call(t, "OPTIONS", "/admin/"+g+"/"+v, nil)
		if code != http.StatusMethodNotAllowed {
			t.Errorf("OPTIONS /admin/%s/%s = %d, want 405: RunsOn names a command the API serves", g, v, code)
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// newNotFound is a debug listener without the admin API; it returns its
// port.
func newNotFound(t *testing.T) string {
	srv := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Port()
}
