package tracing_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/internal/memstore"
	"github.com/dynalimit/dynalimit/internal/service"
	"github.com/dynalimit/dynalimit/internal/tracing"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/descriptors"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/admin"
)

// TestMain runs the tests with one DynamoDB Local for the binary, and
// checks for leaked goroutines once it stopped.
func TestMain(m *testing.M) { goleak.VerifyTestMain(withLocal{m}) }

type withLocal struct{ m *testing.M }

func (w withLocal) Run() int { return dynamotest.Main(w.m) }

const (
	callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	callerSpan  = "00f067aa0ba902b7"
)

const descriptorYAML = `
domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2}
`

// decide serves st behind the tracing interceptor on an in-memory
// listener and sends one ShouldRateLimit call carrying the caller's W3C
// trace context.
func decide(t *testing.T, p *tracing.Provider, st service.Store) {
	t.Helper()
	cfg, err := descriptors.Parse([]descriptors.File{{Name: "api.yaml", Data: []byte(descriptorYAML)}}, descriptors.Options{})
	if err != nil {
		t.Fatalf("descriptors.Parse() = %v", err)
	}
	svc := service.New(tracing.Store(st, p), func() *descriptors.Config { return cfg })
	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer(append(svc.GRPCServerOptions(), grpc.ChainUnaryInterceptor(p.UnaryServerInterceptor()))...)
	svc.RegisterGRPC(gs)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = gs.Serve(lis) }()
	defer func() { gs.Stop(); wg.Wait() }()

	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("grpc.NewClient() = %v", err)
	}
	defer conn.Close()
	ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", "00-"+callerTrace+"-"+callerSpan+"-01")
	resp, err := pb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &pb.RateLimitRequest{
		Domain:      "api",
		Descriptors: []*commonpb.RateLimitDescriptor{{Entries: []*commonpb.RateLimitDescriptor_Entry{{Key: "user", Value: "alice"}}}},
	})
	if err != nil {
		t.Fatalf("ShouldRateLimit() = %v", err)
	}
	if resp.GetOverallCode() != pb.RateLimitResponse_OK {
		t.Fatalf("ShouldRateLimit() = %v, want OK", resp.GetOverallCode())
	}
}

func newInMemory(t *testing.T) (*tracing.Provider, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	p, err := tracing.New(context.Background(), tracing.Options{ServiceName: "RateLimit", SamplingRate: 1, Exporter: exp})
	if err != nil {
		t.Fatalf("tracing.New() = %v", err)
	}
	t.Cleanup(func() { _ = p.Shutdown(context.Background()) })
	return p, exp
}

func byName(spans tracetest.SpanStubs) map[string][]tracetest.SpanStub {
	m := map[string][]tracetest.SpanStub{}
	for _, s := range spans {
		m[s.Name] = append(m[s.Name], s)
	}
	return m
}

const decisionSpan = "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

// checkDecision finds the decision span, parented to the caller's span,
// and the store span under it.
func checkDecision(t *testing.T, spans map[string][]tracetest.SpanStub) (decision, store tracetest.SpanStub) {
	t.Helper()
	if len(spans[decisionSpan]) != 1 || len(spans["ratelimit.store.acquire"]) != 1 {
		t.Fatalf("spans = %v, want one %s and one ratelimit.store.acquire", keys(spans), decisionSpan)
	}
	decision, store = spans[decisionSpan][0], spans["ratelimit.store.acquire"][0]
	if got := decision.SpanContext.TraceID().String(); got != callerTrace {
		t.Errorf("decision trace id = %s, want the caller's %s", got, callerTrace)
	}
	if got := decision.Parent.SpanID().String(); got != callerSpan || !decision.Parent.IsRemote() {
		t.Errorf("decision parent = %s (remote %v), want the caller's %s", got, decision.Parent.IsRemote(), callerSpan)
	}
	if decision.SpanKind != trace.SpanKindServer {
		t.Errorf("decision kind = %v, want server", decision.SpanKind)
	}
	if store.Parent.SpanID() != decision.SpanContext.SpanID() || store.SpanContext.TraceID() != decision.SpanContext.TraceID() {
		t.Errorf("store span parent = %s, want the decision span %s", store.Parent.SpanID(), decision.SpanContext.SpanID())
	}
	return decision, store
}

func keys(m map[string][]tracetest.SpanStub) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

func TestDecisionSpans(t *testing.T) {
	p, exp := newInMemory(t)
	decide(t, p, memstore.New())
	_, store := checkDecision(t, byName(exp.GetSpans()))
	found := false
	for _, a := range store.Attributes {
		if a.Key == "ratelimit.admitted" && a.Value.AsBool() {
			found = true
		}
	}
	if !found {
		t.Errorf("store span attributes = %v, want ratelimit.admitted=true", store.Attributes)
	}
}

// backend is where a test's DynamoDB store keeps its table: a client with
// optFns, and the table's name.
type backend struct {
	name string
	api  func(t *testing.T, optFns ...func(*dynamodb.Options)) (api dynamo.API, table string)
}

var backends = []backend{
	{"fake", func(_ *testing.T, optFns ...func(*dynamodb.Options)) (dynamo.API, string) {
		fake := dynamotest.NewFake()
		// Each write takes a few milliseconds, as DynamoDB's do, so that
		// decisions queue behind it.
		fake.SetFailItem(func(op, _ string) error {
			if op == "UpdateItem" {
				time.Sleep(3 * time.Millisecond)
			}
			return nil
		})
		return dynamotest.SDKClient(fake, optFns...), "t"
	}},
	{"local", func(t *testing.T, optFns ...func(*dynamodb.Options)) (dynamo.API, string) {
		l := dynamotest.Shared(t)
		return l.Client(t, optFns...), dynamotest.TableName(t)
	}},
}

// dynamoStore is a DynamoDB store on table, its client traced (by
// tracing.DynamoDB) and its calls tied to the decisions they serve
// (tracing.CallContext).
func dynamoStore(t *testing.T, api dynamo.API, table string) *dynamo.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := admin.CreateTable(ctx, api, table); err != nil {
		t.Fatalf("CreateTable() = %v", err)
	}
	st, err := dynamo.NewStore(ctx, api, dynamo.Config{Table: table, Timeout: 5 * time.Second}, dynamo.WithCallContext(tracing.CallContext))
	if err != nil {
		t.Fatalf("NewStore() = %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// TestDynamoDBSpans: one decision on the DynamoDB store is one trace, the
// caller's (W3C traceparent): decision span, store span, and under it
// every DynamoDB call the decision needed (the stored-limit read, the cold
// bucket read, the write), though the store makes them on its own
// contexts.
func TestDynamoDBSpans(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			p, exp := newInMemory(t)
			api, table := be.api(t, tracing.DynamoDB(p))
			st := dynamoStore(t, api, table)
			exp.Reset()
			decide(t, p, st)
			spans := byName(exp.GetSpans())
			_, store := checkDecision(t, spans)
			for name, ss := range spans {
				if !strings.HasPrefix(name, "DynamoDB.") {
					continue
				}
				for _, s := range ss {
					if s.Parent.SpanID() != store.SpanContext.SpanID() || s.SpanContext.TraceID() != store.SpanContext.TraceID() {
						t.Errorf("%s: trace %s parent %s, want a child of the store span %s in the caller's trace", name, s.SpanContext.TraceID(), s.Parent.SpanID(), store.SpanContext.SpanID())
					}
					if s.SpanKind != trace.SpanKindClient {
						t.Errorf("%s kind = %v, want client", name, s.SpanKind)
					}
					if n, ok := intAttr(s, "ratelimit.decisions"); !ok || n != 1 {
						t.Errorf("%s: ratelimit.decisions = %d (%v), want 1", name, n, ok)
					}
					if len(s.Links) != 0 {
						t.Errorf("%s: links %v, want none", name, s.Links)
					}
				}
			}
			for _, want := range []string{"DynamoDB.UpdateItem", "DynamoDB.GetItem", "DynamoDB.BatchGetItem"} {
				if len(spans[want]) == 0 {
					t.Errorf("spans = %v, want %s under the decision", keys(spans), want)
				}
			}
			if ev := sharedCalls(store); len(ev) != 0 {
				t.Errorf("store span events %v, want no shared call: each was the decision's own", ev)
			}
		})
	}
}

const hotYAML = `
domain: hot
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000}
`

// hotPlan is one debit on the item of user "hot", with room for every
// decision of the tests: each admitted decision writes.
func hotPlan(t *testing.T) *cascade.Plan {
	t.Helper()
	cfg, err := descriptors.Parse([]descriptors.File{{Name: "hot.yaml", Data: []byte(hotYAML)}}, descriptors.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m, ok := cfg.Match("hot", []descriptors.Entry{{Key: "user", Value: "hot"}})
	if !ok {
		t.Fatal("no rule matches user=hot")
	}
	return &cascade.Plan{Debits: []cascade.Debit{{
		Key: cascade.Key{Entity: m.EntityID(), Resource: "hot"}, Limit: m.Rule.Limits[0].ID,
		Bucket: m.Rule.Limits[0].Bucket, Amount: 1,
	}}}
}

// sharedCalls returns the calls that s's ratelimit.shared_call events
// name: "name trace-id" by span id.
func sharedCalls(s tracetest.SpanStub) map[trace.SpanID]string {
	out := map[trace.SpanID]string{}
	for _, e := range s.Events {
		if e.Name != "ratelimit.shared_call" {
			continue
		}
		var name, traceID string
		var id trace.SpanID
		for _, a := range e.Attributes {
			switch a.Key {
			case "ratelimit.call.name":
				name = a.Value.AsString()
			case "ratelimit.call.trace_id":
				traceID = a.Value.AsString()
			case "ratelimit.call.span_id":
				id, _ = trace.SpanIDFromHex(a.Value.AsString())
			}
		}
		out[id] = name + " " + traceID
	}
	return out
}

// TestDynamoDBSpansHotItem: many decisions at once on one item, each in a
// trace of its own, share conditional writes. Each write's span is in the
// trace of one decision, a child of its store span (the first decision it
// carries), and links to the store spans of the others it carries, each of
// which names the write in a ratelimit.shared_call event; every decision is
// carried by a write; no DynamoDB span is a root.
func TestDynamoDBSpansHotItem(t *testing.T) {
	const decisions = 40
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			p, exp := newInMemory(t)
			api, table := be.api(t, tracing.DynamoDB(p))
			traced := tracing.Store(dynamoStore(t, api, table), p)
			plan := hotPlan(t)
			exp.Reset()
			var wg sync.WaitGroup
			for range decisions {
				wg.Go(func() {
					ctx, root := p.Tracer().Start(context.Background(), "caller")
					defer root.End()
					dec, err := traced.Acquire(ctx, plan)
					if err != nil || !dec.Admitted {
						t.Errorf("Acquire() = %+v, %v, want admitted", dec, err)
					}
				})
			}
			wg.Wait()
			spans := byName(exp.GetSpans())
			stores := map[trace.SpanID]tracetest.SpanStub{}
			traces := map[trace.TraceID]bool{}
			for _, s := range spans["ratelimit.store.acquire"] {
				stores[s.SpanContext.SpanID()] = s
				traces[s.SpanContext.TraceID()] = true
			}
			if len(stores) != decisions || len(traces) != decisions {
				t.Fatalf("%d store spans in %d traces, want %d in as many", len(stores), len(traces), decisions)
			}
			carried := map[trace.SpanID]bool{} // decisions an UpdateItem carried
			loads := map[string][]int{}        // decisions each call served, by call
			for name, ss := range spans {
				if !strings.HasPrefix(name, "DynamoDB.") {
					continue
				}
				for _, s := range ss {
					parent, ok := stores[s.Parent.SpanID()]
					if !ok || !s.Parent.IsValid() || parent.SpanContext.TraceID() != s.SpanContext.TraceID() {
						t.Errorf("%s: trace %s parent %s (valid %v), want a child of one decision's store span, in its trace", name, s.SpanContext.TraceID(), s.Parent.SpanID(), s.Parent.IsValid())
						continue
					}
					n, _ := intAttr(s, "ratelimit.decisions")
					if len(s.Links) != n-1 {
						t.Errorf("%s: %d links for %d decisions, want one per decision but its parent's", name, len(s.Links), n)
					}
					served := map[trace.SpanID]bool{parent.SpanContext.SpanID(): true}
					for _, l := range s.Links {
						id := l.SpanContext.SpanID()
						linked, ok := stores[id]
						if !ok || served[id] {
							t.Errorf("%s: link to %s (a store span %v, seen %v), want each other decision's store span once", name, id, ok, served[id])
							continue
						}
						served[id] = true
						if got, want := sharedCalls(linked)[s.SpanContext.SpanID()], name+" "+s.SpanContext.TraceID().String(); got != want {
							t.Errorf("store span %s: shared-call events %v, want one naming %s %s", id, sharedCalls(linked), want, s.SpanContext.SpanID())
						}
					}
					loads[name] = append(loads[name], n)
					if name == "DynamoDB.UpdateItem" {
						for id := range served {
							carried[id] = true
						}
					}
				}
			}
			writes := len(loads["DynamoDB.UpdateItem"])
			t.Logf("%d decisions; decisions served by each call: %v", decisions, loads)
			if len(carried) != decisions {
				t.Errorf("writes carried %d of the %d decisions, want each", len(carried), decisions)
			}
			if writes >= decisions {
				t.Errorf("%d writes for %d decisions on one item, want them shared", writes, decisions)
			}
		})
	}
}

// TestDynamoDBSpansJoinedRead: a decision that waits for a read another
// decision started (the stored-limit records both need) is linked from the
// read's span, which counts both, and names it in an event of its store
// span; the read stays the first decision's child.
func TestDynamoDBSpansJoinedRead(t *testing.T) {
	p, exp := newInMemory(t)
	fake := dynamotest.NewFake()
	traced := tracing.Store(dynamoStore(t, dynamotest.SDKClient(fake, tracing.DynamoDB(p)), "t"), p)
	plan := hotPlan(t)
	started, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	fake.SetFail(func(ctx context.Context, op string) error {
		if op != "BatchGetItem" {
			return nil
		}
		once.Do(func() { close(started) })
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	exp.Reset()
	acquire := func(wg *sync.WaitGroup, name string) {
		wg.Go(func() {
			ctx, root := p.Tracer().Start(context.Background(), name)
			defer root.End()
			if _, err := traced.Acquire(ctx, plan); err != nil {
				t.Errorf("%s: Acquire() = %v", name, err)
			}
		})
	}
	var wg sync.WaitGroup
	acquire(&wg, "first")
	<-started
	acquire(&wg, "joined")
	// The joining decision finds the read in a few microseconds; it is
	// given far longer before the read answers.
	time.Sleep(200 * time.Millisecond)
	close(release)
	wg.Wait()

	spans := byName(exp.GetSpans())
	roots := map[string]tracetest.SpanStub{}
	for _, name := range []string{"first", "joined"} {
		roots[name] = spans[name][0]
	}
	store := map[string]tracetest.SpanStub{}
	for _, s := range spans["ratelimit.store.acquire"] {
		for name, r := range roots {
			if s.Parent.SpanID() == r.SpanContext.SpanID() {
				store[name] = s
			}
		}
	}
	if len(store) != 2 {
		t.Fatalf("store spans %v, want one per decision", store)
	}
	reads := spans["DynamoDB.BatchGetItem"]
	if len(reads) != 1 {
		t.Fatalf("%d DynamoDB.BatchGetItem spans, want the one both decisions waited for", len(reads))
	}
	read := reads[0]
	if read.Parent.SpanID() != store["first"].SpanContext.SpanID() || read.SpanContext.TraceID() != store["first"].SpanContext.TraceID() {
		t.Errorf("read parent %s, want the first decision's store span %s", read.Parent.SpanID(), store["first"].SpanContext.SpanID())
	}
	if len(read.Links) != 1 || read.Links[0].SpanContext.SpanID() != store["joined"].SpanContext.SpanID() {
		t.Errorf("read links %v, want the joined decision's store span %s", read.Links, store["joined"].SpanContext.SpanID())
	}
	if n, _ := intAttr(read, "ratelimit.decisions"); n != 2 {
		t.Errorf("read ratelimit.decisions = %d, want 2", n)
	}
	if got := sharedCalls(store["joined"])[read.SpanContext.SpanID()]; got != "DynamoDB.BatchGetItem "+read.SpanContext.TraceID().String() {
		t.Errorf("joined store span shared calls %v, want the read %s", sharedCalls(store["joined"]), read.SpanContext.SpanID())
	}
}

// TestCallContext: a call made for several decisions is a child of the
// first sampled decision's span and links to the others, and keeps its own
// deadline and cancellation when the decisions' contexts end.
func TestCallContext(t *testing.T) {
	p, exp := newInMemory(t)
	unsampled := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1},
	}))
	ended, cancelDecision := context.WithCancel(context.Background())
	ended, decision := p.Tracer().Start(ended, "decision")
	cancelDecision()
	call, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	want, _ := call.Deadline()
	ctx := tracing.CallContext(call, []context.Context{unsampled, ended})
	if got, ok := ctx.Deadline(); !ok || !got.Equal(want) || ctx.Err() != nil {
		t.Errorf("call context deadline %v (%v), err %v; want the call's %v and not done", got, ok, ctx.Err(), want)
	}
	api := dynamotest.SDKClient(dynamotest.NewFake(), tracing.DynamoDB(p))
	_, _ = api.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String("t")})
	decision.End()
	spans := byName(exp.GetSpans())
	if len(spans["DynamoDB.DescribeTable"]) != 1 || len(spans["decision"]) != 1 {
		t.Fatalf("spans %v, want one DynamoDB.DescribeTable and one decision", keys(spans))
	}
	s, d := spans["DynamoDB.DescribeTable"][0], spans["decision"][0]
	if s.Parent.SpanID() != d.SpanContext.SpanID() || s.SpanContext.TraceID() != d.SpanContext.TraceID() {
		t.Errorf("call parent %s, want the sampled decision %s", s.Parent.SpanID(), d.SpanContext.SpanID())
	}
	if len(s.Links) != 1 || s.Links[0].SpanContext.SpanID() != (trace.SpanID{1}) {
		t.Errorf("call links %v, want the unsampled decision", s.Links)
	}
	if n, _ := intAttr(s, "ratelimit.decisions"); n != 2 {
		t.Errorf("ratelimit.decisions = %d, want 2", n)
	}
}

func intAttr(s tracetest.SpanStub, key string) (int, bool) {
	for _, a := range s.Attributes {
		if string(a.Key) == key {
			return int(a.Value.AsInt64()), true
		}
	}
	return 0, false
}

// TestDynamoDBChildSpans: a call made on a context that carries a span is
// that span's child, with the table named.
func TestDynamoDBChildSpans(t *testing.T) {
	p, exp := newInMemory(t)
	api := dynamotest.SDKClient(dynamotest.NewFake(), tracing.DynamoDB(p))
	ctx, parent := p.Tracer().Start(context.Background(), "admin")
	if err := admin.CreateTable(ctx, api, "t"); err != nil {
		t.Fatalf("CreateTable() = %v", err)
	}
	parent.End()
	spans := byName(exp.GetSpans())
	ss := spans["DynamoDB.CreateTable"]
	if len(ss) != 1 {
		t.Fatalf("spans = %v, want one DynamoDB.CreateTable", keys(spans))
	}
	if ss[0].Parent.SpanID() != parent.SpanContext().SpanID() {
		t.Errorf("DynamoDB.CreateTable parent = %s, want %s", ss[0].Parent.SpanID(), parent.SpanContext().SpanID())
	}
	found := false
	for _, a := range ss[0].Attributes {
		if a.Key == "aws.dynamodb.table_names" && len(a.Value.AsStringSlice()) == 1 && a.Value.AsStringSlice()[0] == "t" {
			found = true
		}
	}
	if !found {
		t.Errorf("DynamoDB.CreateTable attributes = %v, want aws.dynamodb.table_names [t]", ss[0].Attributes)
	}
}

// collector is an in-process OTLP trace collector, over gRPC and HTTP.
type collector struct {
	coltracepb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []*tracepb.ResourceSpans
}

func (c *collector) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.spans = append(c.spans, req.GetResourceSpans()...)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "unexpected "+r.URL.Path+" "+r.Header.Get("Content-Type"), http.StatusBadRequest)
		return
	}
	b, err := io.ReadAll(r.Body)
	req := &coltracepb.ExportTraceServiceRequest{}
	if err == nil {
		err = proto.Unmarshal(b, req)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	_, _ = c.Export(r.Context(), req)
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// check reports what the collector received: the decision, store and
// DynamoDB spans of the caller's trace, from a resource named as configured.
func (c *collector) check(t *testing.T) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	names := map[string]string{}
	var resource []string
	for _, rs := range c.spans {
		for _, a := range rs.GetResource().GetAttributes() {
			resource = append(resource, a.GetKey()+"="+a.GetValue().GetStringValue())
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				names[s.GetName()] = trace.TraceID(s.GetTraceId()).String()
				if strings.HasPrefix(s.GetName(), "DynamoDB.") && len(s.GetParentSpanId()) == 0 {
					t.Errorf("collector got %s as a root span, want it in the decision's trace", s.GetName())
				}
			}
		}
	}
	for _, want := range []string{decisionSpan, "ratelimit.store.acquire", "DynamoDB.UpdateItem"} {
		if got, ok := names[want]; !ok || got != callerTrace {
			t.Errorf("collector got spans %v, want %s in trace %s", names, want, callerTrace)
		}
	}
	joined := strings.Join(resource, ",")
	for _, want := range []string{"service.name=RateLimit", "service.namespace=gateway", "service.instance.id=pod-1"} {
		if !strings.Contains(joined, want) {
			t.Errorf("resource = %s, want %s", joined, want)
		}
	}
}

func exportOnce(t *testing.T, protocol string) {
	l := dynamotest.Shared(t) // first: under -short it skips, before a provider starts
	p, err := tracing.New(context.Background(), tracing.Options{
		Protocol: protocol, ServiceName: "RateLimit", ServiceNamespace: "gateway", ServiceInstanceID: "pod-1", SamplingRate: 0,
	})
	if err != nil {
		t.Fatalf("tracing.New() = %v", err)
	}
	// Sampling rate 0 samples no root span, but the caller's sampled
	// trace is followed, DynamoDB calls included.
	decide(t, p, dynamoStore(t, l.Client(t, tracing.DynamoDB(p)), dynamotest.TableName(t)))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown() = %v", err)
	}
}

func TestOTLPGRPCExport(t *testing.T) {
	c := &collector{}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(gs, c)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = gs.Serve(lis) }()
	defer func() { gs.Stop(); wg.Wait() }()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+lis.Addr().String())
	exportOnce(t, tracing.ProtocolGRPC)
	c.check(t)
}

func TestOTLPHTTPExport(t *testing.T) {
	c := &collector{}
	srv := httptest.NewServer(c)
	defer srv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	exportOnce(t, tracing.ProtocolHTTP)
	c.check(t)
}

func TestNewRejects(t *testing.T) {
	for _, o := range []tracing.Options{
		{Protocol: "zipkin", SamplingRate: 1},
		{Protocol: tracing.ProtocolHTTP, SamplingRate: 1.5},
		{Protocol: tracing.ProtocolHTTP, SamplingRate: -0.1},
	} {
		if p, err := tracing.New(context.Background(), o); err == nil {
			_ = p.Shutdown(context.Background())
			t.Errorf("tracing.New(%+v) = nil error, want an error", o)
		}
	}
}

// TestDynamoDBEveryOperation: the option traces every operation of the
// client, one the store never calls (DescribeTimeToLive) included, through
// the SDK's real serializing and HTTP path; a failed condition is an
// attribute and any other error fails the span.
func TestDynamoDBEveryOperation(t *testing.T) {
	endpoint := dynamotest.Endpoint(t, map[string]dynamotest.Answer{
		"DescribeTimeToLive": dynamotest.TTLEnabled,
		"PutItem":            dynamotest.ConditionFailed,
	}, dynamotest.Throttled)
	p, exp := newInMemory(t)
	client, err := dynamo.NewClient(context.Background(), endpoint, "us-east-1", tracing.DynamoDB(p))
	if err != nil {
		t.Fatalf("NewClient() = %v", err)
	}
	ctx := context.Background()
	table := aws.String("t")
	if _, err := client.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: table}); err != nil {
		t.Fatalf("DescribeTimeToLive() = %v", err)
	}
	item := map[string]types.AttributeValue{"PK": &types.AttributeValueMemberS{Value: "a"}}
	_, _ = client.PutItem(ctx, &dynamodb.PutItemInput{TableName: table, Item: item})
	_, _ = client.GetItem(ctx, &dynamodb.GetItemInput{TableName: table, Key: item})

	spans := byName(exp.GetSpans())
	cases := []struct {
		name            string
		status          codes.Code
		conditionFailed bool
	}{
		{"DynamoDB.DescribeTimeToLive", codes.Unset, false},
		{"DynamoDB.PutItem", codes.Unset, true},
		{"DynamoDB.GetItem", codes.Error, false},
	}
	for _, c := range cases {
		ss := spans[c.name]
		if len(ss) != 1 {
			t.Errorf("%d %s spans, want 1 (spans %v)", len(ss), c.name, keys(spans))
			continue
		}
		s := ss[0]
		op := strings.TrimPrefix(c.name, "DynamoDB.")
		attrs := map[string]attribute.Value{}
		for _, a := range s.Attributes {
			attrs[string(a.Key)] = a.Value
		}
		want := map[string]string{"rpc.system": "aws-api", "rpc.service": "DynamoDB", "rpc.method": op,
			"db.system.name": "aws.dynamodb", "db.operation.name": op}
		for k, v := range want {
			if got := attrs[k].AsString(); got != v {
				t.Errorf("%s attribute %s = %q, want %q", c.name, k, got, v)
			}
		}
		if got := attrs["aws.dynamodb.table_names"].AsStringSlice(); len(got) != 1 || got[0] != "t" {
			t.Errorf("%s attribute aws.dynamodb.table_names = %q, want [t]", c.name, got)
		}
		if got := attrs["aws.dynamodb.condition_failed"].AsBool(); got != c.conditionFailed {
			t.Errorf("%s aws.dynamodb.condition_failed = %v, want %v", c.name, got, c.conditionFailed)
		}
		if s.SpanKind != trace.SpanKindClient || s.Status.Code != c.status {
			t.Errorf("%s kind %v status %v, want client and %v", c.name, s.SpanKind, s.Status.Code, c.status)
		}
	}
}
