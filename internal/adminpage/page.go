package adminpage

import (
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dynalimit/dynalimit/pkg/descriptors"
)

// Prefix is the path the page is served at on the debug listener, beside
// the admin API.
const Prefix = "/admin/page/"

//go:embed assets/page.css assets/page.html
var assets embed.FS

var page = template.Must(template.New("page.html").Funcs(template.FuncMap{"valid": valid}).ParseFS(assets, "assets/page.html"))

// Options are what the page reads: the admin API's handler, the live
// configuration, /rlconfig's text and the service's metrics.
type Options struct {
	// API is the admin API (internal/admin.API): the page's data comes
	// from its answers.
	API http.Handler
	// Live is the serving process's descriptor configuration.
	Live func() *descriptors.Config
	// ConfigDump is /rlconfig's text.
	ConfigDump func() string
	// Gatherer holds the service's metrics (nil: no fleet figures).
	Gatherer prometheus.Gatherer
	// Store names the store ("memory", "dynamodb", "redis").
	Store string
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// Page is the operator's page, an http.Handler for Prefix; it is safe for
// concurrent use.
type Page struct{ o Options }

// New returns the page over o.
func New(o Options) *Page {
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Page{o: o}
}

// ServeHTTP answers GET Prefix with the page (its query names the bucket
// and the usage to show) and Prefix+"page.css" with its stylesheet.
func (p *Page) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET")
		http.Error(w, "the page only reads: GET", http.StatusMethodNotAllowed)
		return
	}
	switch r.URL.Path {
	case Prefix + "page.css":
		w.Header().Set("Content-Type", "text/css; charset=utf-8")
		css, _ := assets.ReadFile("assets/page.css")
		_, _ = w.Write(css)
		return
	case Prefix:
	case strings.TrimSuffix(Prefix, "/"):
		http.Redirect(w, r, Prefix, http.StatusMovedPermanently)
		return
	default:
		http.NotFound(w, r)
		return
	}
	v := p.view(r)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'")
	if err := page.Execute(w, v); err != nil {
		_, _ = io.WriteString(w, template.HTMLEscapeString(err.Error()))
	}
}

// view gathers what the page shows for the query of r.
func (p *Page) view(r *http.Request) view {
	q := r.URL.Query()
	now := p.o.Now()
	v := view{Now: now.UTC().Format(time.RFC3339), Store: p.o.Store, Host: r.Host}
	v.Bucket = p.bucket(r, q.Get("domain"), q.Get("descriptor"), q.Get("namespace"), now)
	v.Usage = p.usage(q, now)
	v.Fleet = p.fleet()
	if p.o.ConfigDump != nil {
		v.Config = p.o.ConfigDump()
	}
	return v
}

// call makes one call of the admin API in process and decodes its JSON
// answer into out; a failure is the API's error text.
func (p *Page) call(path string, q url.Values, out any) error {
	req := httptest.NewRequest(http.MethodGet, path+"?"+q.Encode(), nil)
	req.RemoteAddr = "127.0.0.1:0"
	rec := httptest.NewRecorder()
	p.o.API.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		var e struct{ Error string }
		if json.Unmarshal(rec.Body.Bytes(), &e) == nil && e.Error != "" {
			return fmt.Errorf("%s", e.Error)
		}
		return fmt.Errorf("%s: %s", path, http.StatusText(rec.Code))
	}
	return json.Unmarshal(rec.Body.Bytes(), out)
}

// valid is s with bytes that are not UTF-8 shown as U+FFFD.
func valid(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }
