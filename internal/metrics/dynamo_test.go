package metrics_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	harness "github.com/dynalimit/dynalimit/internal/testutil"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/internal/metrics"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/admin"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

func TestDynamoDB(t *testing.T) {
	reg := prometheus.NewRegistry()
	fake := dynamotest.NewFake()
	api := dynamotest.SDKClient(fake, metrics.DynamoDB(reg))
	if err := admin.CreateTable(context.Background(), api, "t"); err != nil {
		t.Fatalf("CreateTable() = %v", err)
	}
	now := time.UnixMilli(1_700_000_000_000)
	s, err := dynamo.NewStore(context.Background(), api, dynamo.Config{Table: "t", Timeout: time.Second, RejectionCacheSize: dynamo.DefaultRejectionCacheSize},
		dynamo.WithClock(func() time.Time { return now }), dynamo.WithObserver(metrics.DynamoObserver(reg)))
	if err != nil {
		t.Fatalf("NewStore() = %v", err)
	}
	lim, _ := tokenbucket.Rate(1, time.Hour, 0)
	p := &cascade.Plan{Debits: []cascade.Debit{{Key: cascade.Key{Entity: "e", Resource: "r"}, Limit: "x", Bucket: lim, Amount: tokenbucket.PerToken}}}
	for range 3 { // admitted, refused on the image the write returned, refused from the cache
		if _, err := s.Acquire(context.Background(), p); err != nil {
			t.Fatalf("Acquire() = %v", err)
		}
	}
	want := `
# HELP ratelimit_dynamodb_rejection_cache_hits_total Decisions refused from the local rejection cache without a DynamoDB call.
# TYPE ratelimit_dynamodb_rejection_cache_hits_total counter
ratelimit_dynamodb_rejection_cache_hits_total 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "ratelimit_dynamodb_rejection_cache_hits_total"); err != nil {
		t.Errorf("rejection cache hits: %v", err)
	}
	cases := []struct {
		op, outcome string
		want        float64
	}{
		{"UpdateItem", "ok", 1},
		{"BatchGetItem", "ok", 1}, // the stored limits
		{"GetItem", "ok", 2},      // the schema version, then the new bucket
		{"PutItem", "ok", 1},      // the schema version
	}
	for _, c := range cases {
		n := harness.CounterValue(t, reg, "ratelimit_dynamodb_calls_total", map[string]string{"operation": c.op, "outcome": c.outcome})
		if n != c.want {
			t.Errorf("calls_total{operation=%q,outcome=%q} = %v, want %v", c.op, c.outcome, n, c.want)
		}
	}
	if n := harness.CounterValue(t, reg, "ratelimit_dynamodb_consumed_capacity_units_total", map[string]string{"operation": "UpdateItem"}); n != 1 {
		t.Errorf("consumed_capacity_units_total{operation=UpdateItem} = %v, want 1", n)
	}
	if c := testutil.CollectAndCount(reg, "ratelimit_dynamodb_call_duration_seconds"); c == 0 {
		t.Errorf("call_duration_seconds has no series")
	}
}

func TestRegisterDynamoCaches(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	metrics.RegisterDynamoCaches(reg, func() []dynamo.CacheStats {
		return []dynamo.CacheStats{
			{Name: dynamo.CacheImage, Entries: 3, Capacity: 100, Hits: 7, Misses: 2, Evictions: 1},
			{Name: dynamo.CacheRejection},
		}
	})
	want := `
# HELP ratelimit_dynamodb_cache_entries Entries held by each local cache of the DynamoDB store (image, config, shard, entity, rejection).
# TYPE ratelimit_dynamodb_cache_entries gauge
ratelimit_dynamodb_cache_entries{cache="image"} 3
ratelimit_dynamodb_cache_entries{cache="rejection"} 0
# HELP ratelimit_dynamodb_cache_evictions_total Entries each local cache of the DynamoDB store dropped, least recently used first, to make room.
# TYPE ratelimit_dynamodb_cache_evictions_total counter
ratelimit_dynamodb_cache_evictions_total{cache="image"} 1
ratelimit_dynamodb_cache_evictions_total{cache="rejection"} 0
# HELP ratelimit_dynamodb_cache_lookups_total Lookups in each local cache of the DynamoDB store, by result (hit, miss).
# TYPE ratelimit_dynamodb_cache_lookups_total counter
ratelimit_dynamodb_cache_lookups_total{cache="image",result="hit"} 7
ratelimit_dynamodb_cache_lookups_total{cache="image",result="miss"} 2
ratelimit_dynamodb_cache_lookups_total{cache="rejection",result="hit"} 0
ratelimit_dynamodb_cache_lookups_total{cache="rejection",result="miss"} 0
# HELP ratelimit_dynamodb_cache_max_entries Most entries each local cache of the DynamoDB store holds (0: disabled).
# TYPE ratelimit_dynamodb_cache_max_entries gauge
ratelimit_dynamodb_cache_max_entries{cache="image"} 100
ratelimit_dynamodb_cache_max_entries{cache="rejection"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Errorf("GatherAndCompare() = %v", err)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("GatherAndLint() = %v, %v, want no problems", problems, err)
	}
}

// TestDynamoClockSkew has two replicas on one table, the other one's clock
// 200 ms ahead: the gauge of the replica behind reads 0.2 once it receives
// an item the other wrote.
func TestDynamoClockSkew(t *testing.T) {
	fake := dynamotest.NewFake()
	if err := admin.CreateTable(context.Background(), fake, "t"); err != nil {
		t.Fatalf("CreateTable() = %v", err)
	}
	now := time.UnixMilli(1_700_000_000_000)
	reg := prometheus.NewRegistry()
	behind, err := dynamo.NewStore(context.Background(), fake, dynamo.Config{Table: "t", Timeout: time.Second},
		dynamo.WithClock(func() time.Time { return now }), dynamo.WithObserver(metrics.DynamoObserver(reg)))
	if err != nil {
		t.Fatalf("NewStore(behind) = %v", err)
	}
	defer behind.Close()
	ahead, err := dynamo.NewStore(context.Background(), fake, dynamo.Config{Table: "t", Timeout: time.Second},
		dynamo.WithClock(func() time.Time { return now.Add(200 * time.Millisecond) }))
	if err != nil {
		t.Fatalf("NewStore(ahead) = %v", err)
	}
	defer ahead.Close()
	lim, _ := tokenbucket.Rate(100, time.Second, 0)
	p := &cascade.Plan{Debits: []cascade.Debit{{Key: cascade.Key{Entity: "e", Resource: "r"}, Limit: "x", Bucket: lim, Amount: tokenbucket.PerToken}}}
	for _, s := range []*dynamo.Store{ahead, behind} {
		if _, err := s.Acquire(context.Background(), p); err != nil {
			t.Fatalf("Acquire() = %v", err)
		}
	}
	want := `
# HELP ratelimit_dynamodb_clock_skew_seconds How far this replica's clock is behind the clock of another replica writing the same buckets, at least: the largest offset seen over the last minute between the writer's clock each bucket item records and this replica's clock when the item arrived (0 when this replica is ahead or in step). A fleet whose clocks are this far apart can admit up to this × a limit's rate more than the limit each time its bucket is full.
# TYPE ratelimit_dynamodb_clock_skew_seconds gauge
ratelimit_dynamodb_clock_skew_seconds 0.2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "ratelimit_dynamodb_clock_skew_seconds"); err != nil {
		t.Errorf("clock skew: %v", err)
	}
}

// TestDynamoBatchLevels: a write on a request's own bucket is observed
// under level "own", one on a parent's bucket (its debits all of depth 1
// or more) under "parent".
func TestDynamoBatchLevels(t *testing.T) {
	fake := dynamotest.NewFake()
	if err := admin.CreateTable(context.Background(), fake, "t"); err != nil {
		t.Fatalf("CreateTable() = %v", err)
	}
	reg := prometheus.NewPedanticRegistry()
	now := time.UnixMilli(1_700_000_000_000)
	s, err := dynamo.NewStore(context.Background(), fake, dynamo.Config{Table: "t", Timeout: time.Second},
		dynamo.WithClock(func() time.Time { return now }), dynamo.WithObserver(metrics.DynamoObserver(reg)))
	if err != nil {
		t.Fatalf("NewStore() = %v", err)
	}
	defer s.Close()
	lim, _ := tokenbucket.Rate(100, time.Second, 0)
	p := &cascade.Plan{Debits: []cascade.Debit{
		{Key: cascade.Key{Entity: "key-1", Resource: "r"}, Limit: "x", Bucket: lim, Amount: tokenbucket.PerToken},
		{Key: cascade.Key{Entity: "proj", Resource: "r"}, Limit: "x", Bucket: lim, Amount: tokenbucket.PerToken, Depth: 1},
		{Key: cascade.Key{Entity: "acme", Resource: "r"}, Limit: "x", Bucket: lim, Amount: tokenbucket.PerToken, Depth: 2},
	}}
	if dec, err := s.Acquire(context.Background(), p); err != nil || !dec.Admitted {
		t.Fatalf("Acquire() = %+v, %v, want admitted", dec, err)
	}
	counts := map[string]uint64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather() = %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "ratelimit_dynamodb_batch_decisions" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "level" {
					counts[lp.GetValue()] += m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	if counts["own"] != 1 || counts["parent"] != 2 || len(counts) != 2 {
		t.Errorf("batch_decisions writes by level = %v, want own 1, parent 2", counts)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("GatherAndLint() = %v, %v, want no problems", problems, err)
	}
}

// TestDynamoGiveBacks has a plan over two items refused after its first
// part took a token: the give-back lands at once and is counted so, and
// none is pending. Every result the store reports has its own series.
func TestDynamoGiveBacks(t *testing.T) {
	fake := dynamotest.NewFake()
	if err := admin.CreateTable(context.Background(), fake, "t"); err != nil {
		t.Fatalf("CreateTable() = %v", err)
	}
	reg := prometheus.NewRegistry()
	obs := metrics.DynamoObserver(reg)
	now := time.UnixMilli(1_700_000_000_000)
	s, err := dynamo.NewStore(context.Background(), fake, dynamo.Config{Table: "t", Timeout: time.Second, RejectionCacheSize: dynamo.RejectionCacheOff},
		dynamo.WithClock(func() time.Time { return now }), dynamo.WithObserver(obs))
	if err != nil {
		t.Fatalf("NewStore() = %v", err)
	}
	defer s.Close()
	lim, _ := tokenbucket.Rate(1, time.Hour, 0)
	a, b := cascade.Key{Entity: "a", Resource: "r"}, cascade.Key{Entity: "b", Resource: "r"}
	if dec, err := s.Acquire(context.Background(), &cascade.Plan{Debits: []cascade.Debit{{Key: b, Limit: "x", Bucket: lim, Amount: tokenbucket.PerToken}}}); err != nil || !dec.Admitted {
		t.Fatalf("Acquire(b) = %+v, %v", dec, err)
	}
	both := &cascade.Plan{Debits: []cascade.Debit{{Key: a, Limit: "x", Bucket: lim, Amount: tokenbucket.PerToken}, {Key: b, Limit: "x", Bucket: lim, Amount: tokenbucket.PerToken}}}
	if dec, err := s.Acquire(context.Background(), both); err != nil || dec.Admitted {
		t.Fatalf("Acquire(a and b) = %+v, %v, want refused", dec, err)
	}
	if n := harness.CounterValue(t, reg, "ratelimit_dynamodb_givebacks_total", map[string]string{"result": "applied"}); n != 1 {
		t.Errorf(`givebacks_total{result="applied"} = %v, %v, want 1`, n, err)
	}
	pending := func(n int) string {
		return fmt.Sprintf(`
# HELP ratelimit_dynamodb_givebacks_pending Give-backs of refused requests that DynamoDB did not take yet, retried in the background (their tokens stay consumed meanwhile).
# TYPE ratelimit_dynamodb_givebacks_pending gauge
ratelimit_dynamodb_givebacks_pending %d
`, n)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(pending(0)), "ratelimit_dynamodb_givebacks_pending"); err != nil {
		t.Errorf("givebacks_pending: %v", err)
	}
	results := []string{dynamo.GiveBackApplied, dynamo.GiveBackAppliedRetry, dynamo.GiveBackDroppedAge, dynamo.GiveBackDroppedBound,
		dynamo.GiveBackDroppedClosed, dynamo.GiveBackMoot, dynamo.GiveBackUnknown}
	for _, r := range results {
		obs.GaveBack(r)
	}
	obs.GiveBacksPending(3)
	if c := testutil.CollectAndCount(reg, "ratelimit_dynamodb_givebacks_total"); c != len(results) {
		t.Errorf("givebacks_total has %d series, want %d", c, len(results))
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(pending(3)), "ratelimit_dynamodb_givebacks_pending"); err != nil {
		t.Errorf("givebacks_pending: %v", err)
	}
}

// TestDynamoDBEveryOperation: the option observes every operation of the
// client, one the store never calls (DescribeTimeToLive) included, through
// the SDK's real serializing and HTTP path, and classifies the errors
// DynamoDB answers.
func TestDynamoDBEveryOperation(t *testing.T) {
	endpoint := dynamotest.Endpoint(t, map[string]dynamotest.Answer{
		"DescribeTimeToLive": dynamotest.TTLEnabled,
		"PutItem":            dynamotest.ConditionFailed,
		"Scan":               {Status: http.StatusOK, Body: `{"Count":0,"Items":[],"ScannedCount":0,"ConsumedCapacity":{"TableName":"t","CapacityUnits":2.5}}`},
	}, dynamotest.Throttled)
	reg := prometheus.NewRegistry()
	client, err := dynamo.NewClient(context.Background(), endpoint, "us-east-1", metrics.DynamoDB(reg))
	if err != nil {
		t.Fatalf("NewClient() = %v", err)
	}
	ctx := context.Background()
	table := aws.String("t")
	if out, err := client.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: table}); err != nil || aws.ToString(out.TimeToLiveDescription.AttributeName) != "TTL" {
		t.Fatalf("DescribeTimeToLive() = %+v, %v", out, err)
	}
	if _, err := client.Scan(ctx, &dynamodb.ScanInput{TableName: table}); err != nil {
		t.Fatalf("Scan() = %v", err)
	}
	item := map[string]types.AttributeValue{"PK": &types.AttributeValueMemberS{Value: "a"}}
	if _, err := client.PutItem(ctx, &dynamodb.PutItemInput{TableName: table, Item: item}); err == nil {
		t.Fatalf("PutItem() = nil, want a failed condition")
	}
	if _, err := client.GetItem(ctx, &dynamodb.GetItemInput{TableName: table, Key: item}); err == nil {
		t.Fatalf("GetItem() = nil, want throttled")
	}
	cases := []struct {
		op, outcome string
	}{
		{"DescribeTimeToLive", "ok"},
		{"Scan", "ok"},
		{"PutItem", "condition_failed"},
		{"GetItem", "throttled"},
	}
	for _, c := range cases {
		if n := harness.CounterValue(t, reg, "ratelimit_dynamodb_calls_total", map[string]string{"operation": c.op, "outcome": c.outcome}); n != 1 {
			t.Errorf("calls_total{operation=%q,outcome=%q} = %v, %v, want 1", c.op, c.outcome, n, err)
		}
	}
	if n := harness.CounterValue(t, reg, "ratelimit_dynamodb_consumed_capacity_units_total", map[string]string{"operation": "Scan"}); n != 2.5 {
		t.Errorf("consumed_capacity_units_total{operation=Scan} = %v, want 2.5", n)
	}
	if c := testutil.CollectAndCount(reg, "ratelimit_dynamodb_call_duration_seconds"); c != len(cases) {
		t.Errorf("call_duration_seconds has %d series, want %d", c, len(cases))
	}
}
