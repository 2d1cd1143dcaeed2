package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"

	"github.com/dynalimit/dynalimit/internal/admin"
	"github.com/dynalimit/dynalimit/internal/config"
	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/internal/memstore"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/descriptors"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

const apiConfig = `domain: ops
descriptors:
  - key: generic_key
    value: show
    rate_limit:
      unit: day
      requests_per_unit: 50
`

// embeddedAPI is the admin API over an embedded store and apiConfig, with
// the log lines it writes.
type embeddedAPI struct {
	srv    *httptest.Server
	st     *memstore.Store
	cfg    *descriptors.Config
	logs   *test.Hook
	stores admin.Stores
}

func newEmbeddedAPI(t *testing.T) *embeddedAPI {
	t.Helper()
	cfg, err := descriptors.Parse([]descriptors.File{{Name: "ops.yaml", Data: []byte(apiConfig)}}, descriptors.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := config.Defaults()
	s.Namespace = "default"
	st := memstore.New(memstore.WithNamespace(s.Namespace))
	log, hook := test.NewNullLogger()
	stores := admin.Embedded(st, s.Namespace, logrus.NewEntry(log))
	api := admin.NewAPI(s, stores, func() *descriptors.Config { return cfg }, logrus.NewEntry(log))
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	return &embeddedAPI{srv: srv, st: st, cfg: cfg, logs: hook, stores: stores}
}

// consume admits n requests of generic_key=show as the service would.
func (a *embeddedAPI) consume(t *testing.T, n int) {
	t.Helper()
	m, ok := a.cfg.Match("ops", []descriptors.Entry{{Key: "generic_key", Value: "show"}})
	if !ok {
		t.Fatal("apiConfig does not match generic_key=show")
	}
	l := m.Rule.Limits[0]
	for range n {
		d := cascade.Debit{Key: cascade.Key{Entity: m.EntityID(), Resource: "ops"}, Limit: l.ID, Bucket: l.Bucket, Amount: 1000, Op: cascade.Consume}
		if dec, err := a.st.Acquire(context.Background(), &cascade.Plan{Debits: []cascade.Debit{d}}); err != nil || !dec.Admitted {
			t.Fatalf("Acquire() = %+v, %v", dec, err)
		}
	}
}

// call makes one call and returns its status and body.
func (a *embeddedAPI) call(t *testing.T, method, path string, header map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, a.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// tokens is what the one limit of bucket show's JSON holds.
func tokens(t *testing.T, body string) float64 {
	t.Helper()
	var got []shownBucket
	if err := json.Unmarshal([]byte(body), &got); err != nil || len(got) != 1 || len(got[0].Limits) != 1 {
		t.Fatalf("bucket show = %q (%v), want one bucket of one limit", body, err)
	}
	return got[0].Limits[0].Tokens
}

func TestAPIEmbeddedShowReset(t *testing.T) {
	a := newEmbeddedAPI(t)
	const show = "/admin/bucket/show?domain=ops&descriptor=generic_key=show"
	if code, body := a.call(t, "GET", show, nil); code != 200 || tokens(t, body) != 50 {
		t.Fatalf("GET %s = %d %q, want 200 and 50 tokens", show, code, body)
	}
	a.consume(t, 5)
	for range 2 { // a show consumes nothing
		if code, body := a.call(t, "GET", show, nil); code != 200 || tokens(t, body) != 45 {
			t.Fatalf("GET %s after 5 = %d %q, want 200 and 45 tokens", show, code, body)
		}
	}
	// By entity and resource, as the CLI names it, in the table format.
	code, body := a.call(t, "GET", "/admin/bucket/show?entity=generic_key=show&resource=ops&o=table", nil)
	if code != 200 || !strings.Contains(body, "45") || !strings.Contains(body, "CAPACITY") {
		t.Fatalf("GET bucket/show -o table = %d %q, want a table holding 45", code, body)
	}

	code, body = a.call(t, "POST", "/admin/bucket/reset?domain=ops&descriptor=generic_key=show", map[string]string{admin.PrincipalHeader: "alice"})
	var resets []struct {
		Before    shownBucket `json:"before"`
		Reset     bool        `json:"reset"`
		Principal string      `json:"principal"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &resets) != nil || len(resets) != 1 || !resets[0].Reset || resets[0].Principal != "alice" || resets[0].Before.Limits[0].Tokens != 45 {
		t.Fatalf("POST bucket/reset = %d %q, want reset by alice from 45", code, body)
	}
	if code, body := a.call(t, "GET", show, nil); code != 200 || tokens(t, body) != 50 {
		t.Fatalf("GET %s after reset = %d %q, want 50 tokens", show, code, body)
	}
	e := a.logs.LastEntry()
	if e == nil || e.Data["action"] != "bucket.reset" || e.Data["principal"] != "alice" || e.Data["entity"] != "generic_key=show" {
		t.Errorf("reset log line = %+v, want action bucket.reset by alice on generic_key=show", e)
	}
	// Without the header, the caller's address is the principal.
	a.consume(t, 1)
	if code, body := a.call(t, "POST", "/admin/bucket/reset?entity=generic_key=show&resource=ops", nil); code != 200 || !strings.Contains(body, `"principal": "admin-api@127.0.0.1"`) {
		t.Errorf("POST bucket/reset without %s = %d %q, want principal admin-api@127.0.0.1", admin.PrincipalHeader, code, body)
	}
}

func TestAPIErrors(t *testing.T) {
	a := newEmbeddedAPI(t)
	for _, c := range []struct {
		name, method, path string
		code               int
		want               string // in the error
	}{
		{"unknown command", "GET", "/admin/bucket/drain", 404, "no admin command"},
		{"command not offered", "POST", "/admin/table/create", 404, "no admin command"},
		{"read by POST", "POST", "/admin/bucket/show?entity=e&resource=r", 405, "bucket show takes GET"},
		{"write by GET", "GET", "/admin/bucket/reset?entity=e&resource=r", 405, "bucket reset takes POST"},
		{"no bucket", "GET", "/admin/bucket/show", 400, "missing BUCKET"},
		{"half a bucket", "GET", "/admin/bucket/show?entity=e", 400, "both -entity and -resource"},
		{"unknown parameter", "GET", "/admin/bucket/show?entity=e&resource=r&resorce=x", 400, "unknown parameter resorce; did you mean resource?"},
		{"bad format", "GET", "/admin/bucket/show?entity=e&resource=r&o=yaml", 400, "want table or json"},
		{"server's files", "GET", "/admin/bucket/show?domain=ops&descriptor=a=b&config_dir=/etc", 400, "config_dir is not a parameter"},
		{"principal as a parameter", "POST", "/admin/bucket/reset?entity=e&resource=r&principal=x", 400, admin.PrincipalHeader},
		{"no rule", "GET", "/admin/bucket/show?domain=ops&descriptor=generic_key=nope", 404, "no rule of the live configuration matches"},
		{"usage", "GET", "/admin/usage/list?entity=acme", 501, "embedded store"},
		{"audit", "GET", "/admin/audit/list?entity=acme", 501, "embedded store"},
		{"namespace", "POST", "/admin/namespace/delete?name=team-a", 501, "embedded store"},
		{"purge without yes", "POST", "/admin/namespace/purge?name=team-a", 400, "add -yes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, body := a.call(t, c.method, c.path, nil)
			var e struct{ Error string }
			if code != c.code || json.Unmarshal([]byte(body), &e) != nil || !strings.Contains(e.Error, c.want) {
				t.Errorf("%s %s = %d %q, want %d and an error containing %q", c.method, c.path, code, body, c.code, c.want)
			}
		})
	}
}

// TestRemoteCLI runs bucket show and reset through -admin_url: the same
// output as on DynamoDB's path, from the service's store.
func TestRemoteCLI(t *testing.T) {
	a := newEmbeddedAPI(t)
	a.consume(t, 3)
	env := map[string]string{"USER": "carol"}
	out, err := run(t, env, "bucket", "show", "-admin_url", a.srv.URL, "-domain", "ops", "-descriptor", "generic_key=show")
	if err != nil || !strings.Contains(out, "generic_key=show") || !strings.Contains(out, "47") {
		t.Fatalf("bucket show -admin_url = %q, %v, want a table holding 47", out, err)
	}
	out, err = run(t, env, "bucket", "reset", "-admin_url", a.srv.URL+"/", "-entity", "generic_key=show", "-resource", "ops")
	if err != nil || !strings.Contains(out, "reset to full on 1 shard (was default 47 of 50), by carol") {
		t.Fatalf("bucket reset -admin_url = %q, %v, want a reset by carol", out, err)
	}
	out, err = run(t, env, "bucket", "show", "-admin_url", a.srv.URL, "-o", "json", "-entity", "generic_key=show", "-resource", "ops")
	if err != nil || tokens(t, out) != 50 {
		t.Fatalf("bucket show -admin_url -o json = %q, %v, want 50 tokens", out, err)
	}
	_, err = run(t, env, "usage", "list", "-admin_url", a.srv.URL, "-entity", "acme")
	if err == nil || !strings.Contains(err.Error(), "Not Implemented") || !strings.Contains(err.Error(), "embedded store") {
		t.Errorf("usage list -admin_url on the embedded store error = %v, want Not Implemented", err)
	}
	_, err = run(t, env, "bucket", "show", "-admin_url", a.srv.URL, "-entity", "e", "-resource", "r", "-o", "yaml")
	if !errors.Is(err, admin.ErrUsage) {
		t.Errorf("bucket show -o yaml -admin_url error = %v, want a usage error", err)
	}
	_, err = run(t, env, "bucket", "show", "-admin_url", a.srv.URL, "-domain", "ops", "-descriptor", "a=b", "-config_dir", t.TempDir())
	if !errors.Is(err, admin.ErrUsage) || !strings.Contains(err.Error(), "-config_dir does not go with -admin_url") {
		t.Errorf("bucket show -config_dir -admin_url error = %v, want a usage error", err)
	}
	off := httptest.NewServer(http.NotFoundHandler())
	defer off.Close()
	_, err = run(t, env, "bucket", "show", "-admin_url", off.URL, "-entity", "e", "-resource", "r")
	if err == nil || !strings.Contains(err.Error(), "set ADMIN_API=true") {
		t.Errorf("bucket show -admin_url of a service without the API error = %v, want it to say ADMIN_API", err)
	}
}

// TestAPIOnDynamo runs the admin API on DynamoDB Local as the service
// would (no embedded store): a reset audited under the header's principal,
// the audit it wrote, the lifecycle's answers for an unregistered and an
// active namespace.
func TestAPIOnDynamo(t *testing.T) {
	l := dynamotest.Shared(t)
	env := map[string]string{"DYNAMODB_TABLE": dynamotest.TableName(t), "DYNAMODB_ENDPOINT": l.Endpoint(), "NAMESPACE": "api"}
	if out, err := run(t, env, "table", "create"); err != nil {
		t.Fatalf("table create = %q, %v", out, err)
	}
	s, err := config.FromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	st, err := dynamo.NewStore(ctx, l.Client(t), dynamo.Config{Table: s.DynamoDBTable, Namespace: "api", Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	three, _ := tokenbucket.Rate(3, time.Hour, 0)
	d := cascade.Debit{Key: cascade.Key{Entity: "e", Resource: "r"}, Limit: "rph", Bucket: three, Amount: 3 * tokenbucket.PerToken}
	if dec, err := st.Acquire(ctx, &cascade.Plan{Debits: []cascade.Debit{d}}); err != nil || !dec.Admitted {
		t.Fatalf("Acquire() = %+v, %v", dec, err)
	}
	log, _ := test.NewNullLogger()
	// The serving process's store, its writes audited under each call's
	// principal through a store opened on the same client.
	client := l.Client(t)
	ops := admin.NewDynamo(func(context.Context) (*dynamo.Store, error) { return st, nil }, "", func(ctx context.Context, p string) (*dynamo.Store, error) {
		return dynamo.NewStore(ctx, client, dynamo.Config{Table: s.DynamoDBTable, Namespace: "api", Timeout: 2 * time.Second}, dynamo.WithPrincipal(p))
	})
	defer ops.Close()
	a := &embeddedAPI{srv: httptest.NewServer(admin.NewAPI(s, ops.Stores(), func() *descriptors.Config { return nil }, logrus.NewEntry(log)))}
	defer a.srv.Close()

	code, body := a.call(t, "POST", "/admin/bucket/reset?entity=e&resource=r", map[string]string{admin.PrincipalHeader: "erin"})
	if code != 200 || !strings.Contains(body, `"reset": true`) || !strings.Contains(body, `"tokens": 0`) {
		t.Fatalf("POST bucket/reset = %d %q, want a reset from 0", code, body)
	}
	code, body = a.call(t, "GET", "/admin/bucket/show?entity=e&resource=r", nil)
	if code != 200 || tokens(t, body) != 3 {
		t.Fatalf("GET bucket/show after the reset = %d %q, want 3 tokens", code, body)
	}
	code, body = a.call(t, "GET", "/admin/audit/list?entity=e", nil)
	var recs []struct{ Action, Principal string }
	if code != 200 || json.Unmarshal([]byte(body), &recs) != nil || len(recs) != 1 || recs[0].Action != "bucket.reset" || recs[0].Principal != "erin" {
		t.Errorf("GET audit/list = %d %q, want the reset by erin", code, body)
	}
	if code, body := a.call(t, "GET", "/admin/namespace/show?name=nobody", nil); code != 404 || !strings.Contains(body, "is not registered") {
		t.Errorf("GET namespace/show of an unregistered namespace = %d %q, want 404", code, body)
	}
	if code, body := a.call(t, "GET", "/admin/namespace/list", nil); code != 200 || !strings.Contains(body, `"notes": "no namespaces registered`) {
		t.Errorf("GET namespace/list = %d %q, want 200 and the note that none is registered", code, body)
	}
	if out, err := run(t, env, "namespace", "register", "api"); err != nil {
		t.Fatalf("namespace register = %q, %v", out, err)
	}
	if code, body := a.call(t, "POST", "/admin/namespace/purge?name=api&yes=true", nil); code != 409 || !strings.Contains(body, "is active: delete it first") {
		t.Errorf("POST namespace/purge of an active namespace = %d %q, want 409", code, body)
	}
}

// A top-up through the admin API credits one limit on the embedded store,
// never above its capacity, and is logged.
func TestAPIEmbeddedTopUp(t *testing.T) {
	a := newEmbeddedAPI(t)
	const show = "/admin/bucket/show?domain=ops&descriptor=generic_key=show"
	a.consume(t, 30)
	for _, c := range []struct {
		query string
		want  float64
	}{{"limit=default&amount=12.5", 32.5}, {"limit=default&amount=100", 50}} {
		code, body := a.call(t, "POST", "/admin/bucket/topup?domain=ops&descriptor=generic_key=show&"+c.query, map[string]string{admin.PrincipalHeader: "carol"})
		if code != 200 || !strings.Contains(body, `"principal": "carol"`) {
			t.Fatalf("POST bucket/topup?%s = %d %q", c.query, code, body)
		}
		if code, body := a.call(t, "GET", show, nil); code != 200 || tokens(t, body) != c.want {
			t.Fatalf("after topup?%s: %d %q, want %v tokens", c.query, code, body, c.want)
		}
	}
	if e := a.logs.LastEntry(); e == nil || e.Data["action"] != "bucket.topup" || e.Data["principal"] != "carol" || e.Data["limit"] != "default" {
		t.Errorf("top-up log line = %+v", e)
	}
	for query, want := range map[string]string{
		"limit=nope&amount=1":         `holds no limit named \"nope\": it holds default`,
		"limit=default":               "give -amount N (tokens) or -usd D (dollars)",
		"limit=default&amount=0.0001": "-amount 0.0001: want a positive number of tokens with at most 3 decimals",
		"amount=1":                    "missing -limit",
	} {
		code, body := a.call(t, "POST", "/admin/bucket/topup?domain=ops&descriptor=generic_key=show&"+query, nil)
		if code == 200 || !strings.Contains(body, want) {
			t.Errorf("topup?%s = %d %q, want an error saying %q", query, code, body, want)
		}
	}
}

// bucket show writes a budget in dollars with its period, on every level
// of its chain, and a top-up in dollars lands on the named level.
func TestAPIBudgetInDollars(t *testing.T) {
	const cfgText = `domain: llm
prices:
  default: {request: "12.50"}
descriptors:
  - key: team
    entity: true
    budget: {name: team_month, usd: 2000, per: month, zone: America/New_York}
    descriptors:
      - key: tenant
        entity: true
        cascade: true
        budget: {name: tenant_day, usd: 50, per: day}
`
	cfg, err := descriptors.Parse([]descriptors.File{{Name: "llm.yaml", Data: []byte(cfgText)}}, descriptors.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := config.Defaults()
	s.Namespace = "default"
	st := memstore.New(memstore.WithNamespace(s.Namespace))
	log, _ := test.NewNullLogger()
	srv := httptest.NewServer(admin.NewAPI(s, admin.Embedded(st, s.Namespace, logrus.NewEntry(log)), func() *descriptors.Config { return cfg }, logrus.NewEntry(log)))
	t.Cleanup(srv.Close)
	a := &embeddedAPI{srv: srv, st: st, cfg: cfg}
	m, ok := cfg.Match("llm", []descriptors.Entry{{Key: "team", Value: "ml"}, {Key: "tenant", Value: "acme"}})
	if !ok {
		t.Fatal("no match")
	}
	var debits []cascade.Debit
	for _, tier := range m.Tiers() {
		for _, l := range tier.Limits {
			debits = append(debits, cascade.Debit{Key: cascade.Key{Entity: tier.Entity, Resource: tier.Resource}, Limit: l.ID, Bucket: l.Bucket, Amount: 12_500_000 * tokenbucket.PerToken, Depth: uint8(tier.Depth)})
		}
	}
	if dec, err := st.Acquire(context.Background(), &cascade.Plan{Debits: debits}); err != nil || !dec.Admitted {
		t.Fatalf("Acquire() = %+v, %v", dec, err)
	}
	if code, body := a.call(t, "POST", "/admin/bucket/topup?domain=llm&descriptor=team=ml&limit=team_month&usd=2.5", nil); code != 200 {
		t.Fatalf("topup = %d %q", code, body)
	}
	code, body := a.call(t, "GET", "/admin/bucket/show?domain=llm&descriptor=team=ml,tenant=acme&o=table", nil)
	for _, want := range []string{"tenant_day (day@UTC)", "$37.50", "$50.00", "team_month (month@America/New_York)", "$1990.00", "$2000.00"} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("bucket show = %d:\n%s\nwant %q", code, body, want)
		}
	}
}
