package accesslog_test

import (
	"context"
	"testing"
	"time"

	datav3 "github.com/envoyproxy/go-control-plane/envoy/data/accesslog/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/dynalimit/dynalimit/internal/accesslog"
	"github.com/dynalimit/dynalimit/internal/lease"
	"github.com/dynalimit/dynalimit/internal/metrics"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/descriptors"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// moneyConfig prices gpt-4o at $3 and $15 per million tokens; the daily
// budget settles from Envoy AI Gateway's metadata, the hourly one from
// headers.
const moneyConfig = `
domain: llm
prices:
  models:
    gpt-4o: {input: 3, output: 15}
adjustments:
  - limit: daily_usd
    cost:
      input: {metadata: {namespace: io.envoy.ai_gateway, key: llm_input_token}}
      output: {metadata: {namespace: io.envoy.ai_gateway, key: llm_output_token}}
  - limit: hourly_usd
    cost: {input: {header: x-input-tokens}, output: {trailer: x-output-tokens}}
descriptors:
  - key: model
    limits:
      - name: daily_usd
        budget: {usd: 50, per: day}
      - name: hourly_usd
        budget: {usd: 5, per: hour}
`

// admitted is the price a lease was admitted at: not the configuration's,
// as after a reload that changed it.
var admitted = descriptors.Price{Input: 2_000_000, Output: 10_000_000, Request: 1_000}

// moneyToken signs a lease of limit, in dollars at admitted, estimated at
// 500 input tokens.
func (r *rig) moneyToken(t *testing.T, limit string) string {
	t.Helper()
	budget, err := tokenbucket.Rate(50_000_000, 24*time.Hour, 0)
	if err != nil {
		t.Fatal(err)
	}
	l := &lease.Lease{ID: lease.NewID(), Domain: "llm", Expires: r.now.Add(time.Minute), Buckets: []lease.Bucket{{
		Key:    cascade.Key{Namespace: "default", Entity: "gpt-4o", Resource: "llm"},
		Limits: []lease.Limit{{Name: limit, Bucket: budget, Estimate: admitted.Estimate(500), Money: true, Price: admitted}},
	}}}
	tok, err := r.keys.Sign(l)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func aiGateway(fields map[string]*structpb.Value) map[string]*structpb.Struct {
	return map[string]*structpb.Struct{"io.envoy.ai_gateway": {Fields: fields}}
}

func TestMoneyEntries(t *testing.T) {
	r := rigOf(t, moneyConfig)
	num := structpb.NewNumberValue
	want := admitted.Cost(100_000, 40_000) - admitted.Estimate(500) // at the admission's price
	for _, tc := range []struct {
		name, limit string
		e           func(token string) *datav3.HTTPAccessLogEntry
		want        string
	}{
		{"metadata", "daily_usd", func(tok string) *datav3.HTTPAccessLogEntry {
			return entry(tok, nil, nil, aiGateway(map[string]*structpb.Value{"llm_input_token": num(100_000), "llm_output_token": num(40_000)}))
		}, metrics.AdjustApplied},
		{"metadata as strings", "daily_usd", func(tok string) *datav3.HTTPAccessLogEntry {
			return entry(tok, nil, nil, aiGateway(map[string]*structpb.Value{"llm_input_token": structpb.NewStringValue("100000"), "llm_output_token": structpb.NewStringValue("40000")}))
		}, metrics.AdjustApplied},
		{"header and trailer", "hourly_usd", func(tok string) *datav3.HTTPAccessLogEntry {
			return entry(tok, map[string]string{"X-Input-Tokens": "100000"}, map[string]string{"x-output-tokens": "40000"}, nil)
		}, metrics.AdjustApplied},
		{"input alone", "daily_usd", func(tok string) *datav3.HTTPAccessLogEntry {
			return entry(tok, nil, nil, aiGateway(map[string]*structpb.Value{"llm_input_token": num(100_000)}))
		}, accesslog.ReasonNoCost},
		{"a total alone", "daily_usd", func(tok string) *datav3.HTTPAccessLogEntry {
			return entry(tok, nil, nil, aiGateway(map[string]*structpb.Value{"llm_total_token": num(140_000)}))
		}, accesslog.ReasonNoCost},
		{"a fractional output", "daily_usd", func(tok string) *datav3.HTTPAccessLogEntry {
			return entry(tok, nil, nil, aiGateway(map[string]*structpb.Value{"llm_input_token": num(100_000), "llm_output_token": num(0.5)}))
		}, accesslog.ReasonBadCost},
		{"a negative input", "hourly_usd", func(tok string) *datav3.HTTPAccessLogEntry {
			return entry(tok, map[string]string{"x-input-tokens": "-1"}, map[string]string{"x-output-tokens": "40000"}, nil)
		}, accesslog.ReasonBadCost},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok := r.moneyToken(t, tc.limit)
			e := tc.e(tok)
			if got := r.sink.Settle(context.Background(), e); got != tc.want {
				t.Fatalf("Settle = %q, want %q", got, tc.want)
			}
			if tc.want != metrics.AdjustApplied {
				return
			}
			l, _ := r.keys.Verify(tok, r.now)
			r.st.mu.Lock()
			st := r.st.applied[l.ID]
			r.st.mu.Unlock()
			if len(st.Debits) != 1 || st.Debits[0].Op != cascade.Charge || st.Debits[0].Amount != want || st.Debits[0].Limit != tc.limit {
				t.Errorf("settlement %+v, want a charge of %d nano-dollars on %s", st.Debits, want, tc.limit)
			}
			if got := r.sink.Settle(context.Background(), e); got != metrics.AdjustDuplicate {
				t.Errorf("the entry again = %q, want duplicate", got)
			}
		})
	}
}
