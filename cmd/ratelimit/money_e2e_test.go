package main

import (
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	datav3 "github.com/envoyproxy/go-control-plane/envoy/data/accesslog/v3"
	alsv3 "github.com/envoyproxy/go-control-plane/envoy/service/accesslog/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// moneySettleConfig is the rig: $3 and $15 per million input and
// output tokens and a daily budget of $1 per tenant, settled from Envoy AI
// Gateway's input and output token counts.
const moneySettleConfig = `domain: llm
prices:
  models:
    gpt-4o: {input: 3, output: 15}
adjustments:
  - limit: daily_usd
    cost:
      input: {metadata: {namespace: io.envoy.ai_gateway, key: llm_input_token}}
      output: {metadata: {namespace: io.envoy.ai_gateway, key: llm_output_token}}
descriptors:
  - key: tenant
    entity: true
    descriptors:
      - key: model
        resource: true
        budget: {name: daily_usd, usd: 1, per: day, zone: America/New_York}
`

// moneyEntryFor is the access-log entry of a request admitted with lease
// that used in input and out output tokens, as Envoy AI Gateway reports
// them in dynamic metadata.
func moneyEntryFor(lease string, in, out int) *alsv3.StreamAccessLogsMessage {
	md := &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
		"envoy.filters.http.ratelimit": {Fields: map[string]*structpb.Value{"dynalimit.lease": structpb.NewStringValue(lease)}},
		"io.envoy.ai_gateway": {Fields: map[string]*structpb.Value{
			"llm_input_token": structpb.NewNumberValue(float64(in)), "llm_output_token": structpb.NewNumberValue(float64(out)),
		}},
	}}
	e := &datav3.HTTPAccessLogEntry{CommonProperties: &datav3.AccessLogCommon{Metadata: md}}
	return &alsv3.StreamAccessLogsMessage{LogEntries: &alsv3.StreamAccessLogsMessage_HttpLogs{
		HttpLogs: &alsv3.StreamAccessLogsMessage_HTTPAccessLogEntries{LogEntry: []*datav3.HTTPAccessLogEntry{e}},
	}}
}

// TestMoneySettlesThroughTheLease runs the day on the binary and
// the embedded store: each request is a check that returns a lease, and
// reports 100k input and 40k output tokens ($0.90) after its response, the
// first by the access log (sent twice) and the second by the stream-end
// call (then by the access log too). The first leaves $0.10; the second
// takes the budget $0.80 into debt; the third is refused. Every report
// settles once.
func TestMoneySettlesThroughTheLease(t *testing.T) {
	f := startFleetEnv(t, moneySettleConfig, 1, []string{"LOG_LEVEL=warn", sharedKey})
	c, p := f.clients[0], f.procs[0]
	zero := uint64(0)
	check := []string{"tenant", "acme", "model", "gpt-4o"}
	admit := func() string {
		t.Helper()
		resp := ask(t, c, chainDescriptor(check, &zero))
		lease := resp.GetDynamicMetadata().GetFields()["dynalimit.lease"].GetStringValue()
		if resp.GetOverallCode() != pb.RateLimitResponse_OK || lease == "" {
			t.Fatalf("check: %v, want OK with a lease", resp)
		}
		return lease
	}
	remaining := func() (pb.RateLimitResponse_Code, uint32) {
		resp := ask(t, c, chainDescriptor(check, &zero))
		return resp.GetOverallCode(), resp.GetStatuses()[0].GetLimitRemaining()
	}

	first := admit()
	sendEntries(t, p.GRPCAddr(), moneyEntryFor(first, 100_000, 40_000), moneyEntryFor(first, 100_000, 40_000))
	if code, left := remaining(); code != pb.RateLimitResponse_OK || left != 100_000 {
		t.Fatalf("after the first report: %v with %d micro-dollars left, want OK with $0.10", code, left)
	}

	second := admit()
	end := chainDescriptor([]string{"dynalimit.lease", second, "llm_input_token", "100000", "llm_output_token", "40000"}, nil)
	if resp := ask(t, c, end); resp.GetOverallCode() != pb.RateLimitResponse_OK {
		t.Fatalf("stream end: %v", resp)
	}
	sendEntries(t, p.GRPCAddr(), moneyEntryFor(second, 100_000, 40_000))
	if code, left := remaining(); code != pb.RateLimitResponse_OVER_LIMIT || left != 0 {
		t.Fatalf("after the second report: %v with %d left, want OVER_LIMIT: $0.80 in debt", code, left)
	}

	if applied, dup := f.settled(t, "applied"), f.settled(t, "duplicate"); applied != 2 || dup != 2 {
		t.Errorf("applied %v, duplicates %v; want 2 and 2", applied, dup)
	}
	url := "http://" + p.DebugAddr() + "/metrics"
	if got := scrape(t, url, "ratelimit_adjustment_microdollars_total", `direction="charged"`); got != 1_800_000 {
		t.Errorf("micro-dollars charged by settlements = %v, want %d ($0.90 twice)", got, 1_800_000)
	}
}
