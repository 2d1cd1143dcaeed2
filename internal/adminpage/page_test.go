package adminpage_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/dynalimit/dynalimit/internal/admin"
	"github.com/dynalimit/dynalimit/internal/adminpage"
	"github.com/dynalimit/dynalimit/internal/config"
	"github.com/dynalimit/dynalimit/internal/memstore"
	"github.com/dynalimit/dynalimit/pkg/descriptors"
)

const rules = `domain: ops
descriptors:
  - key: generic_key
    rate_limit: {unit: minute, requests_per_unit: 3}
`

func newPage(t *testing.T) *httptest.Server {
	t.Helper()
	cfg, err := descriptors.Parse([]descriptors.File{{Name: "ops.yaml", Data: []byte(rules)}}, descriptors.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := config.Defaults()
	log, _ := logtest.NewNullLogger()
	st := memstore.New(memstore.WithNamespace(s.Namespace))
	api := admin.NewAPI(s, admin.Embedded(st, s.Namespace, logrus.NewEntry(log)), func() *descriptors.Config { return cfg }, logrus.NewEntry(log))
	page := adminpage.New(adminpage.Options{API: api, Live: func() *descriptors.Config { return cfg }, ConfigDump: func() string { return "domain: ops <b>" }, Store: "memory"})
	srv := httptest.NewServer(page)
	t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, u string) (int, string, http.Header) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// TestPageEscapes: descriptor values with markup, quotes and invalid
// UTF-8 come back escaped, in the form and in the store's answer; the
// configuration's text too.
func TestPageEscapes(t *testing.T) {
	srv := newPage(t)
	hostile := "generic_key=<script>alert('x')</script>\"\xff"
	code, body, h := get(t, srv.URL+adminpage.Prefix+"?"+url.Values{"domain": {"ops"}, "descriptor": {hostile}}.Encode())
	if code != 200 || !strings.HasPrefix(h.Get("Content-Type"), "text/html") {
		t.Fatalf("page = %d %s", code, h.Get("Content-Type"))
	}
	if strings.Contains(body, "<script") || strings.Contains(body, "<b>") || strings.Contains(body, "\xff") {
		t.Errorf("page holds unescaped input:\n%s", body)
	}
	for _, want := range []string{"&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&#34;\uFFFD", "domain: ops &lt;b&gt;", `data-limit="default"`} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %q:\n%s", want, body)
		}
	}
	if !strings.Contains(h.Get("Content-Security-Policy"), "default-src 'none'") {
		t.Errorf("Content-Security-Policy = %q, want no script", h.Get("Content-Security-Policy"))
	}
}

// TestPageReadsOnly: the page answers GET only, serves its stylesheet, and
// says what the store does not keep (usage on the embedded store).
func TestPageReadsOnly(t *testing.T) {
	srv := newPage(t)
	resp, err := http.Post(srv.URL+adminpage.Prefix, "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST page = %d, want 405", resp.StatusCode)
	}
	if code, css, _ := get(t, srv.URL+adminpage.Prefix+"page.css"); code != 200 || !strings.Contains(css, "@media") {
		t.Errorf("page.css = %d", code)
	}
	if code, _, _ := get(t, srv.URL+adminpage.Prefix+"nope"); code != 404 {
		t.Errorf("unknown path = %d, want 404", code)
	}
	_, body, _ := get(t, srv.URL+adminpage.Prefix+"?entity=acme")
	if !strings.Contains(body, "does not keep usage history") {
		t.Errorf("usage on the embedded store: page lacks the store's answer:\n%s", body)
	}
}
