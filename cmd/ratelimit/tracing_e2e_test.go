package main

import (
	"context"
	"encoding/hex"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

// otlpCollector is an in-process OTLP trace collector over gRPC.
type otlpCollector struct {
	coltracepb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []*tracepb.Span
}

func (c *otlpCollector) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			c.spans = append(c.spans, ss.GetSpans()...)
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func (c *otlpCollector) byName() map[string][]*tracepb.Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := map[string][]*tracepb.Span{}
	for _, s := range c.spans {
		m[s.GetName()] = append(m[s.GetName()], s)
	}
	return m
}

// TestBinaryTracesDecisionsOnDynamoDB: the binary with TRACING_ENABLED on
// DynamoDB exports, to an OTLP collector over gRPC, one trace per decision
// in the caller's trace id (W3C traceparent in the gRPC metadata): the
// decision span, the store span under it, and under that the DynamoDB
// calls the decision needed, the bucket write included.
func TestBinaryTracesDecisionsOnDynamoDB(t *testing.T) {
	const (
		callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
		callerSpan  = "00f067aa0ba902b7"
	)
	c := &otlpCollector{}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(gs, c)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)

	env := dynamoEnv(t, "BACKEND_TIMEOUT=400ms")
	dir := t.TempDir()
	writeConfig(t, dir, "e2e.yaml", e2eConfig)
	p := startBinary(t, dir, append(env,
		"TRACING_ENABLED=true",
		"TRACING_EXPORTER_PROTOCOL=grpc",
		"TRACING_SAMPLING_RATE=0", // only the caller's sampled trace
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://"+lis.Addr().String(),
		"OTEL_BSP_SCHEDULE_DELAY=100",
	)...)

	cc, err := grpc.NewClient(p.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "traceparent", "00-"+callerTrace+"-"+callerSpan+"-01")
	if _, err := pb.NewRateLimitServiceClient(cc).ShouldRateLimit(ctx, &pb.RateLimitRequest{
		Domain: "e2e", Descriptors: []*rlv3.RateLimitDescriptor{descriptor("generic_key", "plenty")},
	}); err != nil {
		t.Fatalf("ShouldRateLimit() = %v", err)
	}

	const decision = "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
	var spans map[string][]*tracepb.Span
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		spans = c.byName()
		if len(spans[decision]) > 0 && len(spans["DynamoDB.UpdateItem"]) > 0 || time.Now().After(deadline) {
			break
		}
	}
	hex := hex.EncodeToString
	one := func(name string) *tracepb.Span {
		t.Helper()
		if len(spans[name]) != 1 {
			t.Fatalf("collector has %d %q spans, want 1 (all: %v)", len(spans[name]), name, names(spans))
		}
		return spans[name][0]
	}
	dec, store := one(decision), one("ratelimit.store.acquire")
	if hex(dec.GetTraceId()) != callerTrace || hex(dec.GetParentSpanId()) != callerSpan {
		t.Errorf("decision span in trace %s under %s, want the caller's %s under %s", hex(dec.GetTraceId()), hex(dec.GetParentSpanId()), callerTrace, callerSpan)
	}
	if hex(store.GetParentSpanId()) != hex(dec.GetSpanId()) {
		t.Errorf("store span under %s, want the decision span %s", hex(store.GetParentSpanId()), hex(dec.GetSpanId()))
	}
	for name, ss := range spans {
		if !strings.HasPrefix(name, "DynamoDB.") {
			continue
		}
		for _, s := range ss {
			if hex(s.GetTraceId()) != callerTrace || hex(s.GetParentSpanId()) != hex(store.GetSpanId()) {
				t.Errorf("%s in trace %s under %s, want the caller's trace under the store span %s", name, hex(s.GetTraceId()), hex(s.GetParentSpanId()), hex(store.GetSpanId()))
			}
		}
	}
	if len(spans["DynamoDB.UpdateItem"]) == 0 {
		t.Errorf("no DynamoDB.UpdateItem span in the caller's trace (all: %v)", names(spans))
	}
}

func names(m map[string][]*tracepb.Span) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
