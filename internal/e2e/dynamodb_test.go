package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/internal/envoytest"
)

// dynamoDelay is added to every DynamoDB call: DynamoDB Local answers in a
// few milliseconds on an idle machine; with the delay each call takes what a
// slow DynamoDB write takes (15–20 ms), whatever the machine's load.
const dynamoDelay = 15 * time.Millisecond

// TestDynamoDBTimeouts runs the plain example on DynamoDB (DynamoDB Local
// behind a proxy that makes each call take at least 15 ms) and shows what
// users see with the wrong timeouts, then with the example's. A login carries
// two descriptors (two bucket items), so a decision is at least two calls,
// and the first one on new buckets up to five in sequence (50–250 ms here,
// with DynamoDB Local's own time on a busy machine):
//
//   - Envoy's default 20 ms filter timeout with the default BACKEND_TIMEOUT
//     (15 ms): the service gives up on DynamoDB first and answers as
//     ON_UNAVAILABLE says: with allow the login limit is silently not
//     enforced; with local (the default) the service's answers keep it,
//     and only answers that come after Envoy's 20 ms fail open;
//   - the same filter timeout with a BACKEND_TIMEOUT above it: Envoy gives
//     up first, counts errors and fails open, while the service's writes
//     still land;
//   - the example's 1 s filter timeout with BACKEND_TIMEOUT=400ms: every
//     decision is made by DynamoDB, exactly 5 logins pass. The margin
//     between the two covers gRPC and a busy machine (100 ms and more were
//     seen here under the race detector).
func TestDynamoDBTimeouts(t *testing.T) {
	envoytest.Scenario(t, "4 DynamoDB: Envoy's 20 ms timeout against slow writes, then BACKEND_TIMEOUT below the filter's timeout")
	local := dynamotest.Shared(t)
	proxy := envoytest.StartDelayProxy(t, strings.TrimPrefix(local.Endpoint(), "http://"), dynamoDelay)
	table := dynamotest.TableName(t)
	local.DropAtCleanup(t, table)
	env := []string{
		"BACKEND_TYPE=dynamodb",
		"DYNAMODB_ENDPOINT=http://" + proxy.Addr,
		"DYNAMODB_TABLE=" + table,
		"AWS_REGION=us-east-1",
	}
	envoytest.RunBinary(t, append(env, "DYNAMODB_ENDPOINT="+local.Endpoint()), "table", "create")
	defaultTimeout := envoytest.SetFilterField("envoy.filters.http.ratelimit", "timeout", nil)

	cases := []struct {
		name  string
		edits []envoytest.Edit
		env   []string
		// enforced: exactly 5 of 8 logins pass, with no Envoy error and no
		// ON_UNAVAILABLE answer. Otherwise more than 5 pass, and Envoy's
		// errors and the service's ON_UNAVAILABLE answers say why; with
		// local, the service's own answers admit at most 5.
		enforced, envoyErrors, onUnavailable, local bool
	}{
		// 15 ms leaves 5 ms for gRPC and scheduling: the service's
		// ON_UNAVAILABLE answer usually arrives in time, sometimes not.
		{name: "envoy default 20ms, BACKEND_TIMEOUT default 15ms, ON_UNAVAILABLE=allow", edits: []envoytest.Edit{defaultTimeout}, env: []string{"ON_UNAVAILABLE=allow"}, onUnavailable: true},
		{name: "envoy default 20ms, BACKEND_TIMEOUT default 15ms, ON_UNAVAILABLE=local (default)", edits: []envoytest.Edit{defaultTimeout}, onUnavailable: true, local: true},
		{name: "envoy default 20ms, BACKEND_TIMEOUT=2s", edits: []envoytest.Edit{defaultTimeout}, env: []string{"BACKEND_TIMEOUT=2s"}, envoyErrors: true},
		{name: "example: timeout 1s, BACKEND_TIMEOUT=400ms", env: []string{"BACKEND_TIMEOUT=400ms"}, enforced: true},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// A client address of its own per attempt: a bucket of its own.
			ip := fmt.Sprintf("127.0.1.%d", i+1)
			ok := loginsThroughDynamoDB(t, env, tc.edits, tc.env, ip, tc.enforced, tc.envoyErrors, tc.onUnavailable, tc.local, tc.enforced)
			if !ok {
				// DynamoDB Local on a busy machine can be slower than even a
				// generous budget; the example's timeouts get one more try.
				t.Logf("DynamoDB Local was slower than BACKEND_TIMEOUT; once more on new buckets")
				loginsThroughDynamoDB(t, env, tc.edits, tc.env, fmt.Sprintf("127.0.2.%d", i+1), tc.enforced, tc.envoyErrors, tc.onUnavailable, tc.local, false)
			}
		})
	}
}

// loginsThroughDynamoDB sends 8 logins from ip through a fresh Envoy and
// service and checks what users see. With retryable set, a run whose only
// fault is the service answering by ON_UNAVAILABLE returns false instead of
// failing t.
func loginsThroughDynamoDB(t *testing.T, env []string, edits []envoytest.Edit, extra []string, ip string, enforced, envoyErrors, onUnavailable, local, retryable bool) bool {
	t.Helper()
	r := envoytest.Start(t, envoytest.Options{
		Bootstrap: plainBootstrap, ConfigDir: configDir,
		Env: append(append([]string{}, env...), extra...), Edits: edits,
	})
	c := envoytest.Client(t, ip)
	var codes []int
	var slowest time.Duration
	for range 8 {
		start := time.Now()
		resp := r.Do(t, c, http.MethodPost, "/login")
		slowest = max(slowest, time.Since(start))
		codes = append(codes, resp.Status)
	}
	admitted := 0
	for _, code := range codes {
		if code == http.StatusOK {
			admitted++
		}
	}
	st := r.Envoy.RateLimitStats(t, appCluster)
	m := r.Service.Metrics(t)
	// Answers the service made without DynamoDB: allow's, or local's.
	localOK := m[`ratelimit_local_decisions_total{decision="allowed"}`]
	unavailable := m[`ratelimit_on_unavailable_total{decision="allowed"}`] + localOK + m[`ratelimit_local_decisions_total{decision="refused"}`]
	t.Logf("users see %v (%d of 8 admitted against 5 a minute), slowest %v; envoy %s; service answered %v by ON_UNAVAILABLE (%v admitted locally)",
		codes, admitted, slowest.Round(time.Millisecond), st, unavailable, localOK)
	if retryable && st.Error == 0 && unavailable > 0 {
		return false
	}
	switch {
	case local:
		// The service's own answers keep the limit; only Envoy's
		// timeouts, failing open, let more through.
		if admitted > 5+int(st.Error) {
			t.Errorf("%d of 8 admitted with %d Envoy errors, want at most 5 plus the errors: local decisions keep the limit", admitted, st.Error)
		}
	case enforced:
		if admitted != 5 || st.Error != 0 || unavailable != 0 {
			t.Errorf("%d of 8 admitted, envoy %s, %v ON_UNAVAILABLE answers; want exactly 5, no error, none", admitted, st, unavailable)
		}
	case admitted <= 5:
		t.Errorf("%d of 8 admitted, want more than 5: the limit is not enforced with these timeouts", admitted)
	}
	if st.FailureModeAllowed != st.Error {
		t.Errorf("envoy %s, want every error let through (failure_mode_deny: false)", st)
	}
	if envoyErrors && st.Error == 0 {
		t.Errorf("envoy %s, want filter timeouts counted as errors", st)
	}
	if onUnavailable && unavailable == 0 {
		t.Error("the service answered no request by ON_UNAVAILABLE, want it to give up on DynamoDB first")
	}
	if !onUnavailable && unavailable != 0 {
		t.Errorf("the service answered %v requests by ON_UNAVAILABLE, want none", unavailable)
	}
	return true
}
