package charttest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"gopkg.in/yaml.v3"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/internal/envoytest"
	"github.com/dynalimit/dynalimit/internal/metrics"
	"github.com/dynalimit/dynalimit/internal/testutil"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
)

func TestMetricNames(t *testing.T) {
	cases := []struct {
		expr string
		want []string
	}{
		{`sum by (code) (rate(ratelimit_decisions_total{namespace=~"$namespace", job="x"}[$__rate_interval]))`, []string{"ratelimit_decisions_total"}},
		{`histogram_quantile(0.99, sum by (le, operation) (rate(a_seconds_bucket[5m])))`, []string{"a_seconds_bucket"}},
		{`sum(rate(a_sum[1m])) / on (job) group_left (x) sum(rate(a_count[1m])) > bool 0.5 offset 5m`, []string{"a_count", "a_sum"}},
		{`max(up{job="a{b}"}) or vector(1e3) and label_replace(b, "dst", "$1", "src", "(.*)")`, []string{"b", "up"}},
		{`min(ratelimit_config_last_reload_successful)`, []string{"ratelimit_config_last_reload_successful"}},
	}
	for _, tc := range cases {
		if got := MetricNames(tc.expr); !slices.Equal(got, tc.want) {
			t.Errorf("MetricNames(%s) = %v, want %v", tc.expr, got, tc.want)
		}
	}
	fams := map[string]string{"h": "histogram", "s": "summary", "c_count": "counter", "g": "gauge"}
	for name, want := range map[string]string{"h_bucket": "h", "h_sum": "h", "h_count": "h", "s_sum": "s", "s_bucket": "", "c_count": "c_count", "g_count": "", "g": "g", "h": "h", "x": ""} {
		if got, _ := Resolve(name, fams); got != want {
			t.Errorf("Resolve(%s) = %q, want %q", name, got, want)
		}
	}
}

// dashboardExprs returns every PromQL expression of the dashboard's panels,
// rows' nested panels included, keyed by "panel title/refId".
func dashboardExprs(t *testing.T, src []byte) map[string]string {
	t.Helper()
	type panel struct {
		Title   string `json:"title"`
		Targets []struct {
			RefID string `json:"refId"`
			Expr  string `json:"expr"`
		} `json:"targets"`
		Panels []json.RawMessage `json:"panels"`
	}
	var dash struct {
		Panels []json.RawMessage `json:"panels"`
	}
	if err := json.Unmarshal(src, &dash); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	exprs := map[string]string{}
	var walk func([]json.RawMessage)
	walk = func(raw []json.RawMessage) {
		for _, r := range raw {
			var p panel
			if err := json.Unmarshal(r, &p); err != nil {
				t.Fatalf("panel: %v", err)
			}
			for _, tg := range p.Targets {
				exprs[p.Title+"/"+tg.RefID] = tg.Expr
			}
			walk(p.Panels)
		}
	}
	walk(dash.Panels)
	return exprs
}

// unknownMetrics returns, sorted, "panel: metric" for every metric a
// dashboard expression names that is none of families.
func unknownMetrics(exprs map[string]string, families map[string]string) []string {
	var bad []string
	for where, expr := range exprs {
		for _, name := range MetricNames(expr) {
			if _, ok := Resolve(name, families); !ok {
				bad = append(bad, where+": "+name)
			}
		}
	}
	slices.Sort(bad)
	return bad
}

// binaryFamilies starts the binary on the embedded store with the chart's
// default descriptors, makes one decision, and returns the families its
// /metrics serves, by name to type.
func binaryFamilies(t *testing.T) map[string]string {
	t.Helper()
	var values struct {
		Descriptors map[string]string `yaml:"descriptors"`
	}
	src, err := os.ReadFile(filepath.Join(testutil.RepoRoot(t), chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(src, &values); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for file, text := range values.Descriptors {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	svc := envoytest.StartService(t, dir, "BACKEND_TYPE=memory")
	cc, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", svc.GRPCPort), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := pb.NewRateLimitServiceClient(cc).ShouldRateLimit(ctx, &pb.RateLimitRequest{
		Domain: "example",
		Descriptors: []*commonpb.RateLimitDescriptor{{
			Entries: []*commonpb.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.0.0.1"}},
		}},
	}); err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	// A request without a domain is refused, and counted by reason.
	if _, err := pb.NewRateLimitServiceClient(cc).ShouldRateLimit(ctx, &pb.RateLimitRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("ShouldRateLimit without a domain: %v, want InvalidArgument", err)
	}
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", svc.DebugPort))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	fams := map[string]string{}
	for name, mf := range mfs {
		fams[name] = strings.ToLower(mf.GetType().String())
	}
	return fams
}

// capacityReporter is the fake DynamoDB answering GetItem with consumed
// capacity, as DynamoDB does when asked (ReturnConsumedCapacity).
type capacityReporter struct{ *dynamotest.Fake }

func (c capacityReporter) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	out, err := c.Fake.GetItem(ctx, in, o...)
	if out == nil {
		out = &dynamodb.GetItemOutput{}
	}
	out.ConsumedCapacity = &types.ConsumedCapacity{CapacityUnits: aws.Float64(0.5)}
	return out, err
}

// dynamoFamilies returns the families internal/metrics registers for the
// DynamoDB store, each observed once so that every one is gathered.
func dynamoFamilies(t *testing.T) map[string]string {
	t.Helper()
	reg := prometheus.NewRegistry()
	api := dynamotest.SDKClient(capacityReporter{dynamotest.NewFake()}, metrics.DynamoDB(reg))
	_, _ = api.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String("t"), Key: map[string]types.AttributeValue{"PK": &types.AttributeValueMemberS{Value: "a"}}})
	obs := metrics.DynamoObserver(reg)
	obs.ShardDoubled()
	obs.RejectionCacheHit()
	obs.Contended("queued")
	obs.Batched(2, 0)
	obs.ClockBehind(time.Millisecond)
	obs.GaveBack("applied")
	obs.GiveBacksPending(1)
	metrics.RegisterDynamoCaches(reg, func() []dynamo.CacheStats { return []dynamo.CacheStats{{Name: "image", Entries: 1, Capacity: 2}} })
	local := metrics.DegradeObserver(reg) // ON_UNAVAILABLE=local
	local.Local(true)
	local.Items(1, 2)
	local.Repaid("applied")
	local.Lost(1000, 1)
	metrics.RegisterFleetSize(reg, func() int { return 3 })
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	fams := map[string]string{}
	for _, mf := range mfs {
		fams[mf.GetName()] = strings.ToLower(mf.GetType().String())
	}
	for _, want := range []string{"ratelimit_dynamodb_calls_total", "ratelimit_dynamodb_consumed_capacity_units_total", "ratelimit_dynamodb_contended_total", "ratelimit_dynamodb_batch_decisions"} {
		if _, ok := fams[want]; !ok {
			t.Fatalf("internal/metrics gathered no %s: %v", want, fams)
		}
	}
	return fams
}

// TestDashboardMetrics: every metric the dashboard queries is one the
// binary serves on the embedded store, or one internal/metrics registers
// for the DynamoDB store; a dashboard naming another one fails.
func TestDashboardMetrics(t *testing.T) {
	if testing.Short() {
		t.Skip("charttest: starts the built binary, which -short does not build")
	}
	src, err := os.ReadFile(filepath.Join(testutil.RepoRoot(t), chartDir, "dashboards", "dynalimit.json"))
	if err != nil {
		t.Fatal(err)
	}
	exprs := dashboardExprs(t, src)
	if len(exprs) < 20 {
		t.Fatalf("the dashboard has %d queries; want every panel of it", len(exprs))
	}
	fams := binaryFamilies(t)
	if _, ok := fams["ratelimit_decisions_total"]; !ok {
		t.Fatalf("the binary's /metrics has no ratelimit_decisions_total after a decision: %v", fams)
	}
	for name, typ := range dynamoFamilies(t) {
		fams[name] = typ
	}
	used := map[string]bool{}
	for _, expr := range exprs {
		for _, name := range MetricNames(expr) {
			if f, ok := Resolve(name, fams); ok {
				used[f] = true
			}
		}
	}
	t.Logf("%d queries over %d metric families", len(exprs), len(used))
	if bad := unknownMetrics(exprs, fams); len(bad) > 0 {
		t.Fatalf("the dashboard queries metrics the binary does not export:\n%s", strings.Join(bad, "\n"))
	}

	// A mutated copy: a misspelled metric, and a histogram suffix on a counter.
	for _, tc := range []struct{ from, to, want string }{
		{"ratelimit_decisions_total", "ratelimit_decision_total", "ratelimit_decision_total"},
		{"ratelimit_dynamodb_contended_total", "ratelimit_dynamodb_contended_total_bucket", "ratelimit_dynamodb_contended_total_bucket"},
		{"ratelimit_dynamodb_batch_decisions_sum", "ratelimit_dynamodb_batch_decision_sum", "ratelimit_dynamodb_batch_decision_sum"},
	} {
		mutated := strings.ReplaceAll(string(src), tc.from, tc.to)
		bad := unknownMetrics(dashboardExprs(t, []byte(mutated)), fams)
		if !slices.ContainsFunc(bad, func(s string) bool { return strings.HasSuffix(s, ": "+tc.want) }) {
			t.Errorf("a dashboard with %s instead of %s passed the check (unknown: %v)", tc.to, tc.from, bad)
		}
	}
}
