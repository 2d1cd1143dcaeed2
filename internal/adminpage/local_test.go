package adminpage_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/dynalimit/dynalimit/internal/admin"
	"github.com/dynalimit/dynalimit/internal/adminpage"
	"github.com/dynalimit/dynalimit/internal/config"
	"github.com/dynalimit/dynalimit/internal/degrade"
	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/descriptors"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	dadmin "github.com/dynalimit/dynalimit/pkg/dynamo/admin"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// TestPageShowsDecidedLocally: while the DynamoDB fake fails the writes
// of an item, the replica decides it locally, and the admin API's bucket
// show (decided_locally, the DECIDED column) and the page say so; once the
// table answers and the debt is repaid, they say it is decided on the
// table again.
func TestPageShowsDecidedLocally(t *testing.T) { synctest.Test(t, testPageShowsDecidedLocally) }

func testPageShowsDecidedLocally(t *testing.T) {
	ctx := context.Background()
	fake := dynamotest.NewFake()
	if err := dadmin.CreateTable(ctx, fake, "t"); err != nil {
		t.Fatal(err)
	}
	s := config.Defaults()
	shared, err := dynamo.NewStore(ctx, fake, dynamo.Config{Table: "t", Namespace: s.Namespace, Timeout: 50 * time.Millisecond, ThrottleFails: true})
	if err != nil {
		t.Fatal(err)
	}
	local := degrade.New(shared, degrade.Config{ID: "r1"})
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = local.Run(runCtx); close(done) }()
	t.Cleanup(func() {
		cancel()
		<-done
		_ = shared.Close()
	})
	cfg, err := descriptors.Parse([]descriptors.File{{Name: "ops.yaml", Data: []byte(rules)}}, descriptors.Options{})
	if err != nil {
		t.Fatal(err)
	}
	live := func() *descriptors.Config { return cfg }
	logger, _ := logtest.NewNullLogger()
	st := admin.NewDynamo(func(context.Context) (*dynamo.Store, error) { return shared, nil }, "", nil).Stores()
	st.Local = admin.LocalIn(local, s.Namespace)
	api := admin.NewAPI(s, st, live, logrus.NewEntry(logger))
	page := adminpage.New(adminpage.Options{API: api, Live: live, Store: "dynamodb"})

	// The service's plan for domain ops, descriptor generic_key=demo: the
	// store's own namespace is "" in it.
	limit := tokenbucket.Limit{Capacity: 3 * tokenbucket.PerToken, RefillAmount: tokenbucket.PerToken, RefillPeriod: 20 * time.Second}
	plan := &cascade.Plan{Debits: []cascade.Debit{{Key: cascade.Key{Entity: "generic_key=demo", Resource: "ops"}, Limit: "default", Bucket: limit, Amount: tokenbucket.PerToken}}}
	acquire := func() cascade.Decision {
		t.Helper()
		dec, err := local.Acquire(ctx, plan)
		if err != nil {
			t.Fatalf("Acquire() = %v", err)
		}
		return dec
	}
	query := url.Values{"domain": {"ops"}, "descriptor": {"generic_key=demo"}}
	check := func(when string, want bool) {
		t.Helper()
		var shown []struct {
			DecidedLocally *bool `json:"decided_locally"`
		}
		body := serve(t, api, "/admin/bucket/show?"+query.Encode())
		if err := json.Unmarshal([]byte(body), &shown); err != nil || len(shown) != 1 || shown[0].DecidedLocally == nil || *shown[0].DecidedLocally != want {
			t.Errorf("%s: bucket show = %s (%v), want decided_locally %t", when, body, err, want)
		}
		column := map[bool]string{true: "local", false: "shared"}[want]
		if table := serve(t, api, "/admin/bucket/show?"+query.Encode()+"&o=table"); !strings.Contains(table, "DECIDED") || !strings.Contains(table, "  "+column+"\n") {
			t.Errorf("%s: bucket show -o table =\n%s\nwant a DECIDED column saying %s", when, table, column)
		}
		html := serve(t, page, adminpage.Prefix+"?"+query.Encode())
		attr := map[bool]string{true: `data-decided-locally="true">Decided locally on this replica now`, false: `data-decided-locally="false">Decided on the table: this replica does not decide it locally now`}[want]
		if !strings.Contains(html, attr) {
			t.Errorf("%s: the page lacks %q:\n%s", when, attr, html)
		}
	}

	if dec := acquire(); dec.Local {
		t.Fatalf("before the outage: %+v, want decided on the table", dec)
	}
	check("on the table", false)
	// The table fails every write: the item goes local; reads still answer.
	fake.SetFail(func(_ context.Context, op string) error {
		if op == "GetItem" || op == "BatchGetItem" || op == "Query" {
			return nil
		}
		return &types.InternalServerError{Message: new(string)}
	})
	if dec := acquire(); !dec.Local {
		t.Fatalf("during the outage: %+v, want decided locally", dec)
	}
	check("during the outage", true)
	fake.SetFail(nil)
	time.Sleep(5 * time.Second) // the repayment lands: the item goes back
	synctest.Wait()
	if local.DecidedLocally(plan.Debits[0].Key) {
		t.Fatalf("5 s after the table answers again the item is still decided locally")
	}
	check("after the outage", false)
}

// serve is h's answer to a GET of path, which must be 200.
func serve(t *testing.T, h http.Handler, path string) string {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.RemoteAddr = "127.0.0.1:1"
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("GET %s = %d %s", path, rec.Code, rec.Body)
	}
	return rec.Body.String()
}
