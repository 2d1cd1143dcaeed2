package main

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	datav3 "github.com/envoyproxy/go-control-plane/envoy/data/accesslog/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	alsv3 "github.com/envoyproxy/go-control-plane/envoy/service/accesslog/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/dynalimit/dynalimit/internal/testutil"
)

// settleConfig is a three-level chain (tenant → project → key, cascading)
// with 1,000 tokens an hour on every level, settled from x-llm-tokens.
const settleConfig = `domain: llm
adjustments:
  - limit: tokens
    cost: {header: x-llm-tokens}
descriptors:
  - key: tenant
    entity: true
    limits: [{name: tokens, unit: hour, requests_per_unit: 1000}]
    descriptors:
      - key: project
        entity: true
        limits: [{name: tokens, unit: hour, requests_per_unit: 1000}]
        descriptors:
          - key: api_key
            entity: true
            cascade: true
            limits: [{name: tokens, unit: hour, requests_per_unit: 1000}]
`

// sharedKey is the lease key every replica of a test fleet shares.
const sharedKey = "LEASE_SIGNING_KEY=a key every replica of this fleet shares, 48 bytes"

// chainLevels are the descriptors that reach each level of the chain alone,
// the key first (its rule cascades, so a check of it checks all three; the
// key level is the one that answers when all are equal).
var chainLevels = [][]string{
	{"tenant", "acme", "project", "web", "api_key", "k1"},
	{"tenant", "acme", "project", "web"},
	{"tenant", "acme"},
}

func chainDescriptor(kv []string, hits *uint64) *rlv3.RateLimitDescriptor {
	d := &rlv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	if hits != nil {
		d.HitsAddend = wrapperspb.UInt64(*hits)
	}
	return d
}

func ask(t *testing.T, c pb.RateLimitServiceClient, d *rlv3.RateLimitDescriptor) *pb.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "llm", Descriptors: []*rlv3.RateLimitDescriptor{d}})
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return resp
}

// TestFleetUsageSequenceLeavesEveryLevelInDebt is Envoy Gateway's usage
// sequence on two replicas sharing DynamoDB: a check (0 hits) on one
// replica, then a stream-end charge of 1,200 on the other, on a three-level
// chain of 1,000 tokens an hour. Every level is 200 in debt, so the next
// check is refused on either replica, and each level's reset is the time
// the refill takes to repay 1,200 tokens: 72 minutes.
func TestFleetUsageSequenceLeavesEveryLevelInDebt(t *testing.T) {
	f := startFleetWith(t, settleConfig, 2, sharedKey, "BACKEND_TIMEOUT=1s")
	zero, cost := uint64(0), uint64(1200)
	if resp := ask(t, f.clients[0], chainDescriptor(chainLevels[0], &zero)); resp.GetOverallCode() != pb.RateLimitResponse_OK {
		t.Fatalf("check: %v", resp)
	}
	resp := ask(t, f.clients[1], chainDescriptor(chainLevels[0], &cost))
	if resp.GetOverallCode() != pb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("a charge of 1,200 on 1,000 tokens: %v, want OVER_LIMIT (charged, and it did not fit)", resp)
	}
	want := 72 * time.Minute // 1,200 tokens at 1,000 an hour
	for _, c := range f.clients {
		for i, level := range chainLevels {
			resp := ask(t, c, chainDescriptor(level, &zero))
			st := resp.GetStatuses()[0]
			if resp.GetOverallCode() != pb.RateLimitResponse_OVER_LIMIT || st.GetLimitRemaining() != 0 {
				t.Errorf("level %d after the charge: %v, want refused with 0 remaining", i, resp)
			}
			reset := st.GetDurationUntilReset().AsDuration()
			if reset > want || reset < want-5*time.Second {
				t.Errorf("level %d: reset in %s, want %s (200 in debt, 1,200 to repay at 1,000 an hour)", i, reset, want)
			}
		}
	}
}

// entryFor builds the access-log entry Envoy would send for a request
// admitted with lease that reported cost in x-llm-tokens.
func entryFor(lease string, cost int) *alsv3.StreamAccessLogsMessage {
	md := &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
		"envoy.filters.http.ratelimit": {Fields: map[string]*structpb.Value{"dynalimit.lease": structpb.NewStringValue(lease)}},
	}}
	e := &datav3.HTTPAccessLogEntry{
		CommonProperties: &datav3.AccessLogCommon{Metadata: md},
		Response:         &datav3.HTTPResponseProperties{ResponseHeaders: map[string]string{"x-llm-tokens": fmt.Sprint(cost)}},
	}
	return &alsv3.StreamAccessLogsMessage{LogEntries: &alsv3.StreamAccessLogsMessage_HttpLogs{
		HttpLogs: &alsv3.StreamAccessLogsMessage_HTTPAccessLogEntries{LogEntry: []*datav3.HTTPAccessLogEntry{e}},
	}}
}

// sendEntries streams msgs to the access-log service at addr and closes
// the stream.
func sendEntries(t *testing.T, addr string, msgs ...*alsv3.StreamAccessLogsMessage) {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Error(err)
		return
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := alsv3.NewAccessLogServiceClient(cc).StreamAccessLogs(ctx)
	if err != nil {
		t.Error(err)
		return
	}
	for _, m := range msgs {
		if err := stream.Send(m); err != nil {
			t.Error(err)
			return
		}
	}
	if _, err := stream.CloseAndRecv(); err != nil {
		t.Error(err)
	}
}

// settled sums a settlement result over the fleet's replicas.
func (f *fleet) settled(t *testing.T, result string) float64 {
	sum := 0.0
	for _, p := range f.procs {
		sum += scrape(t, "http://"+p.DebugAddr()+"/metrics", "ratelimit_adjustments_total", `result="`+result+`"`)
	}
	return sum
}

// TestFleetSettlesAnEntryOnce sends the access-log entry of one request to
// both replicas of a fleet on DynamoDB at once, twice each: one applies it,
// on every level of the chain, and the other three are counted duplicates.
// Then the request's stream-end call, to either replica, is a duplicate too.
func TestFleetSettlesAnEntryOnce(t *testing.T) {
	f := startFleetWith(t, settleConfig, 2, sharedKey, "BACKEND_TIMEOUT=1s")
	estimate := uint64(100)
	req := &pb.RateLimitRequest{Domain: "llm", HitsAddend: uint32(estimate), Descriptors: []*rlv3.RateLimitDescriptor{chainDescriptor(chainLevels[0], nil)}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	admitted, err := f.clients[0].ShouldRateLimit(ctx, req)
	if err != nil || admitted.GetOverallCode() != pb.RateLimitResponse_OK {
		t.Fatalf("admission: %v %v", admitted, err)
	}
	lease := admitted.GetDynamicMetadata().GetFields()["dynalimit.lease"].GetStringValue()
	if lease == "" {
		t.Fatalf("no lease in %v", admitted.GetDynamicMetadata())
	}
	// 100 taken on every level; the entry reports 400: 300 more.
	var wg sync.WaitGroup
	for range 2 {
		for _, p := range f.procs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sendEntries(t, p.GRPCAddr(), entryFor(lease, 400))
			}()
		}
	}
	wg.Wait()
	if applied, dup := f.settled(t, "applied"), f.settled(t, "duplicate"); applied != 1 || dup != 3 {
		t.Fatalf("applied %v, duplicates %v; want 1 and 3", applied, dup)
	}
	cost := uint64(400)
	end := chainDescriptor([]string{"dynalimit.lease", lease}, &cost)
	for _, c := range f.clients {
		if resp := ask(t, c, end); resp.GetOverallCode() != pb.RateLimitResponse_OK {
			t.Errorf("stream end: %v", resp)
		}
	}
	if applied, dup := f.settled(t, "applied"), f.settled(t, "duplicate"); applied != 1 || dup != 5 {
		t.Fatalf("after the stream-end calls: applied %v, duplicates %v; want 1 and 5", applied, dup)
	}
	// Every level holds 1,000 − 400, and what refilled since the
	// admission (1,000 an hour: a token every 3.6 s).
	zero := uint64(0)
	refill := int(math.Ceil(time.Since(start).Hours() * 1000))
	for i, level := range chainLevels {
		resp := ask(t, f.clients[1], chainDescriptor(level, &zero))
		got := int(resp.GetStatuses()[0].GetLimitRemaining())
		if want := 1000 - 400; got < want || got > want+refill {
			t.Errorf("level %d holds %d, want %d (+%d refilled at most)", i, got, want, refill)
		}
	}
}

// TestWarnsWithoutLeaseKey: a replica with no lease key generates one and
// says at start that its leases will not verify on another replica; one
// with a key says nothing of the kind.
func TestWarnsWithoutLeaseKey(t *testing.T) {
	const warning = "leases are signed with a key generated at start"
	dir := t.TempDir()
	writeConfig(t, dir, "llm.yaml", settleConfig)
	p := startBinary(t, dir)
	if !testutil.Eventually(5*time.Second, func() bool { return strings.Contains(p.Output(), warning) }) {
		t.Errorf("no warning without a lease key; output:\n%s", p.Output())
	}
	q := startBinary(t, dir, sharedKey)
	time.Sleep(200 * time.Millisecond)
	if strings.Contains(q.Output(), warning) {
		t.Errorf("warned with LEASE_SIGNING_KEY set; output:\n%s", q.Output())
	}
}
