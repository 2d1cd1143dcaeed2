package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/internal/envoytest"
	"github.com/dynalimit/dynalimit/internal/testutil"
)

// llmBootstrap is the LLM gateway of examples/envoy/config/llm.yaml: an
// estimate of 500 tokens taken on (tenant, project, api_key) before the
// request, settled through Envoy's access log from x-llm-tokens.
const llmBootstrap = "examples/envoy/envoy-llm.yaml"

// The capacities of the chain's levels in llm.yaml, tokens a minute: the
// key, its project and its tenant.
var llmCapacity = [3]int{10000, 50000, 100000}

// Series of the settlements.
const (
	llmApplied    = `ratelimit_adjustments_total{path="access_log",result="applied"}`
	llmEndApplied = `ratelimit_adjustments_total{path="stream_end",result="applied"}`
	llmCharged    = `ratelimit_adjustment_tokens_total{direction="charged"}`
	llmRefunded   = `ratelimit_adjustment_tokens_total{direction="refunded"}`
)

// llmRig starts the LLM example as written, plus edits.
func llmRig(t *testing.T, env []string, edits ...envoytest.Edit) *envoytest.Rig {
	t.Helper()
	return envoytest.Start(t, envoytest.Options{
		Bootstrap: llmBootstrap,
		ConfigDir: configDir,
		Env:       env,
		Edits:     edits,
	})
}

// llmLevels reads what each level of (acme, web, key) holds, key first,
// with a check (0 hits) of each level's own descriptor through the
// service's JSON endpoint: the key's descriptor cascades to all three, and
// answers for the key, the least of them.
func llmLevels(t *testing.T, r *envoytest.Rig, key string) [3]int {
	t.Helper()
	entries := [][]string{
		{"tenant", "acme", "project", "web", "api_key", key},
		{"tenant", "acme", "project", "web"},
		{"tenant", "acme"},
	}
	var out [3]int
	for i, kv := range entries {
		var es []map[string]string
		for j := 0; j < len(kv); j += 2 {
			es = append(es, map[string]string{"key": kv[j], "value": kv[j+1]})
		}
		body, _ := json.Marshal(map[string]any{"domain": "llm", "descriptors": []any{map[string]any{"entries": es, "hitsAddend": "0"}}})
		resp, err := http.Post("http://"+r.Service.HTTPAddr()+"/json", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			Statuses []struct {
				LimitRemaining int `json:"limitRemaining"`
			} `json:"statuses"`
		}
		err = json.NewDecoder(resp.Body).Decode(&got)
		resp.Body.Close()
		if err != nil || len(got.Statuses) != 1 {
			t.Fatalf("JSON check of %v: %v %+v", kv, err, got)
		}
		out[i] = got.Statuses[0].LimitRemaining
	}
	return out
}

// chat sends one request of key through Envoy whose response reports cost
// tokens in x-llm-tokens, and waits until series has counted one more.
func chat(t *testing.T, r *envoytest.Rig, c *http.Client, key string, cost int, series string) {
	t.Helper()
	before := metric(t, r, series)
	resp := r.Do(t, c, http.MethodGet, fmt.Sprintf("/v1/chat?header=x-llm-tokens:%d", cost), "x-tenant", "acme", "x-project", "web", "x-api-key", key)
	if resp.Status != http.StatusOK {
		t.Fatalf("request of %s: status %d, want 200 (headers %v)", key, resp.Status, resp.Header)
	}
	if !testutil.Eventually(15*time.Second, func() bool { return metric(t, r, series) >= before+1 }) {
		t.Fatalf("no settlement reached the service within 15 s: %s = %v", series, metric(t, r, series))
	}
}

// checkLevels compares each level with want, allowing what refilled since
// start (each level refills its capacity a minute).
func checkLevels(t *testing.T, got, want [3]int, start time.Time) {
	t.Helper()
	for i := range got {
		refill := int(math.Ceil(time.Since(start).Minutes() * float64(llmCapacity[i])))
		if got[i] < want[i] || got[i] > want[i]+refill {
			t.Errorf("level %d (key, project, tenant) holds %d, want %d (+%d refilled at most)", i, got[i], want[i], refill)
		}
	}
}

// TestLLMSettlesThroughTheAccessLog runs the LLM gateway example as
// written, on both stores: a response of 2,000 tokens to a request admitted
// with an estimate of 500 charges 1,500 more on every level of the chain
// once Envoy's access log delivers its entry, and one of 100 gives 400
// back on every level.
func TestLLMSettlesThroughTheAccessLog(t *testing.T) {
	t.Parallel()
	envoytest.Scenario(t, "11 LLM gateway: an estimate at admission, settled through the access log on every level (memory, DynamoDB and Redis)")
	onStores(t, func(t *testing.T, env []string) {
		r := llmRig(t, env)
		c := envoytest.Client(t, "127.0.0.40")
		start := time.Now()

		chat(t, r, c, "key-1", 2000, llmApplied)
		if got := metric(t, r, llmCharged); got != 3*1500 {
			t.Errorf("%s = %v, want 4500: 1,500 on each of three levels", llmCharged, got)
		}
		checkLevels(t, llmLevels(t, r, "key-1"), [3]int{10000 - 2000, 50000 - 2000, 100000 - 2000}, start)

		chat(t, r, c, "key-2", 100, llmApplied)
		if got := metric(t, r, llmRefunded); got != 3*400 {
			t.Errorf("%s = %v, want 1200: 400 back on each of three levels", llmRefunded, got)
		}
		checkLevels(t, llmLevels(t, r, "key-2"), [3]int{10000 - 100, 50000 - 2100, 100000 - 2100}, start)
	})
}

// TestLLMBothPathsSettleOnce adds the stream-end call to the example: the
// request's cost then arrives twice, by the stream-end call and by the
// access log, with the same lease. It is charged once; the later of the
// two is a counted duplicate.
func TestLLMBothPathsSettleOnce(t *testing.T) {
	t.Parallel()
	envoytest.Scenario(t, "12 LLM gateway with the stream-end call and the access log: one charge, one duplicate")
	streamEnd := map[string]any{
		"actions": []any{map[string]any{"metadata": map[string]any{
			"descriptor_key": "dynalimit.lease",
			"metadata_key":   map[string]any{"key": "envoy.filters.http.ratelimit", "path": []any{map[string]any{"key": "dynalimit.lease"}}},
		}}},
		"apply_on_stream_done": true,
		"hits_addend":          map[string]any{"format": "%RESP(x-llm-tokens)%"},
	}
	r := llmRig(t, nil, envoytest.AppendRouteRateLimit(streamEnd))
	c := envoytest.Client(t, "127.0.0.41")
	chat(t, r, c, "key-1", 2000, llmEndApplied)
	dup := `ratelimit_adjustments_total{path="access_log",result="duplicate"}`
	if !testutil.Eventually(15*time.Second, func() bool { return metric(t, r, dup) == 1 }) {
		t.Fatalf("the access-log entry was not counted a duplicate within 15 s: %s = %v", dup, metric(t, r, dup))
	}
	if got := metric(t, r, llmApplied); got != 0 {
		t.Errorf("%s = %v: the access log settled a lease the stream-end call had settled", llmApplied, got)
	}
	if got := metric(t, r, llmCharged); got != 3*1500 {
		t.Errorf("%s = %v, want 4500", llmCharged, got)
	}
}
