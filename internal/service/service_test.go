package service

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/dynalimit/dynalimit/internal/metrics"
	harness "github.com/dynalimit/dynalimit/internal/testutil"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/descriptors"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// statusString renders a descriptor status as "CODE/remaining/rpu", or
// "CODE/-" (with the remaining count when not zero) without a current limit.
func statusString(s *pb.RateLimitResponse_DescriptorStatus) string {
	code := "OK"
	if s.GetCode() == pb.RateLimitResponse_OVER_LIMIT {
		code = "OVER"
	} else if s.GetCode() != pb.RateLimitResponse_OK {
		code = s.GetCode().String()
	}
	if s.GetCurrentLimit() == nil {
		if s.GetLimitRemaining() != 0 {
			return fmt.Sprintf("%s/%d/-", code, s.GetLimitRemaining())
		}
		return code + "/-"
	}
	return fmt.Sprintf("%s/%d/%d", code, s.GetLimitRemaining(), s.GetCurrentLimit().GetRequestsPerUnit())
}

func respString(r *pb.RateLimitResponse) string {
	parts := make([]string, len(r.GetStatuses()))
	for i, s := range r.GetStatuses() {
		parts[i] = statusString(s)
	}
	code := "OK"
	if r.GetOverallCode() == pb.RateLimitResponse_OVER_LIMIT {
		code = "OVER"
	} else if r.GetOverallCode() != pb.RateLimitResponse_OK {
		code = r.GetOverallCode().String()
	}
	return code + " [" + strings.Join(parts, " ") + "]"
}

type step struct {
	req     *pb.RateLimitRequest
	advance time.Duration // store clock moves forward first
	want    string        // respString of the response
}

// usageSteps is Envoy Gateway's usage-based sequence on descriptor key=u of
// a limit of 21: a check (hits_addend 0) before each request and a
// stream-end charge of 10 (hits_addend 10) after it, three times, the third
// charge overshooting; then a check, answered after.
func usageSteps(key, after string) []step {
	check := func(want string) step { return step{req: rlReq("api", withHits(desc(key, "u"), 0)), want: want} }
	charge := func(want string) step { return step{req: rlReq("api", withHits(desc(key, "u"), 10)), want: want} }
	return []step{
		check("OK [OK/21/21]"), charge("OK [OK/11/21]"),
		check("OK [OK/11/21]"), charge("OK [OK/1/21]"),
		check("OK [OK/1/21]"), charge("OVER [OVER/0/21]"),
		check(after),
	}
}

func TestShouldRateLimit(t *testing.T) {
	const maxU32 = math.MaxUint32
	override := func(d *rlv3.RateLimitDescriptor, rpu uint32, unit typev3.RateLimitUnit) *rlv3.RateLimitDescriptor {
		d.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: unit}
		return d
	}
	tests := []struct {
		name  string
		opts  []Option
		steps []step
		// check runs after the steps against the store.
		check func(t *testing.T, st *fakeStore)
	}{
		{
			name: "three per minute",
			steps: []step{
				{req: rlReq("api", desc("user", "alice")), want: "OK [OK/2/3]"},
				{req: rlReq("api", desc("user", "alice")), want: "OK [OK/1/3]"},
				{req: rlReq("api", desc("user", "alice")), want: "OK [OK/0/3]"},
				{req: rlReq("api", desc("user", "alice")), want: "OVER [OVER/0/3]"},
				{req: rlReq("api", desc("user", "alice")), advance: 20 * time.Second, want: "OK [OK/0/3]"},
				{req: rlReq("api", desc("user", "bob")), want: "OK [OK/2/3]"},
			},
		},
		{
			name: "two descriptors one exhausted refuses and keeps the other's tokens",
			steps: []step{
				{req: &pb.RateLimitRequest{Domain: "api", HitsAddend: 3, Descriptors: []*rlv3.RateLimitDescriptor{desc("user", "bob")}}, want: "OK [OK/0/3]"},
				{req: rlReq("api", desc("ip", "10.0.0.1"), desc("user", "bob")), want: "OVER [OK/10/10 OVER/0/3]"},
				{req: rlReq("api", desc("ip", "10.0.0.1")), want: "OK [OK/9/10]"},
			},
			check: func(t *testing.T, st *fakeStore) {
				if got := st.tokens("ip=10.0.0.1", "default"); got != 9 {
					t.Errorf("ip bucket tokens = %d, want 9 (refused request debits nothing)", got)
				}
			},
		},
		{
			name: "hits_addend variants, a descriptor's own consumed",
			opts: []Option{WithDescriptorHitsCharge(false)},
			steps: []step{
				{req: &pb.RateLimitRequest{Domain: "api", HitsAddend: 2, Descriptors: []*rlv3.RateLimitDescriptor{desc("user", "h")}}, want: "OK [OK/1/3]"},
				{req: &pb.RateLimitRequest{Domain: "api", HitsAddend: 5, Descriptors: []*rlv3.RateLimitDescriptor{withHits(desc("user", "h"), 1)}}, want: "OK [OK/0/3]"},
				{req: rlReq("api", withHits(desc("ip", "h"), 10)), want: "OK [OK/0/10]"},
				{req: rlReq("api", withHits(desc("ip", "h2"), 11)), want: "OVER [OVER/0/10]"},
				{req: rlReq("api", desc("ip", "h2")), want: "OK [OK/9/10]"},
			},
		},
		{
			name: "check only",
			steps: []step{
				{req: rlReq("api", withHits(desc("user", "c"), 0)), want: "OK [OK/3/3]"},
				{req: &pb.RateLimitRequest{Domain: "api", HitsAddend: 3, Descriptors: []*rlv3.RateLimitDescriptor{desc("user", "c")}}, want: "OK [OK/0/3]"},
				// exhausted, not over: a check passes, as on envoyproxy/ratelimit
				{req: rlReq("api", withHits(desc("user", "c"), 0)), want: "OK [OK/0/3]"},
				{req: rlReq("api", desc("user", "c")), want: "OVER [OVER/0/3]"},
			},
		},
		{
			name: "negative hits refund",
			steps: []step{
				{req: &pb.RateLimitRequest{Domain: "api", HitsAddend: 3, Descriptors: []*rlv3.RateLimitDescriptor{desc("user", "n")}}, want: "OK [OK/0/3]"},
				{req: rlReq("api", negative(desc("user", "n"), 2)), want: "OK [OK/2/3]"},
				{req: rlReq("api", negative(desc("user", "n"), 50)), want: "OK [OK/3/3]"},
				{req: rlReq("api", desc("user", "n")), want: "OK [OK/2/3]"},
			},
		},
		{
			name: "limit override replaces the rule",
			steps: []step{
				{req: rlReq("api", override(desc("user", "o"), 1, typev3.RateLimitUnit_HOUR)), want: "OK [OK/0/1]"},
				{req: rlReq("api", override(desc("user", "o"), 1, typev3.RateLimitUnit_HOUR)), want: "OVER [OVER/0/1]"},
				{req: rlReq("api", desc("user", "o")), want: "OK [OK/2/3]"},
				{req: rlReq("api", override(desc("unmatched", "x"), 2, typev3.RateLimitUnit_SECOND)), want: "OK [OK/1/2]"},
				{req: rlReq("api", override(desc("shadow", "o"), 1, typev3.RateLimitUnit_MINUTE)), want: "OK [OK/0/1]"},
				{req: rlReq("api", override(desc("shadow", "o"), 1, typev3.RateLimitUnit_MINUTE)), want: "OVER [OVER/0/1]"},
				{req: rlReq("api", override(desc("user", "z"), 0, typev3.RateLimitUnit_MINUTE)), want: "OVER [OVER/0/0]"},
				{req: rlReq("other", override(desc("user", "o"), 1, typev3.RateLimitUnit_MINUTE)), want: "OK [OK/-]"},
			},
		},
		{
			name: "replaces drops the replaced rule",
			steps: []step{
				{req: rlReq("api", desc("generic", "g"), desc("specific", "s")), want: "OK [OK/- OK/4/5]"},
				{req: rlReq("api", desc("generic", "g"), desc("specific", "s")), want: "OK [OK/- OK/3/5]"},
				{req: rlReq("api", desc("generic", "g")), want: "OK [OK/0/1]"},
				{req: rlReq("api", desc("generic", "g")), want: "OVER [OVER/0/1]"},
			},
		},
		{
			name: "rule shadow mode reports OK",
			steps: []step{
				{req: rlReq("api", desc("shadow", "s")), want: "OK [OK/0/1]"},
				{req: rlReq("api", desc("shadow", "s")), want: "OK [OK/0/1]"},
				{req: rlReq("api", desc("shadow", "s"), desc("user", "s")), want: "OK [OK/0/1 OK/2/3]"},
			},
		},
		{
			name: "global shadow mode never refuses",
			opts: []Option{WithShadowMode(true)},
			steps: []step{
				{req: &pb.RateLimitRequest{Domain: "api", HitsAddend: 3, Descriptors: []*rlv3.RateLimitDescriptor{desc("user", "g")}}, want: "OK [OK/0/3]"},
				{req: rlReq("api", desc("user", "g")), want: "OK [OVER/0/3]"},
				{req: rlReq("api", desc("blocked", "g")), want: "OK [OVER/0/0]"},
			},
		},
		{
			name: "quota mode",
			steps: []step{
				{req: rlReq("api", desc("quota_a", "1")), want: "OK [OK/0/1]"},
				// the only quota descriptor fails: refused
				{req: rlReq("api", desc("quota_a", "1")), want: "OVER [OVER/0/1]"},
				// one of two quota descriptors fails: allowed
				{req: rlReq("api", desc("quota_a", "1"), desc("quota_b", "1")), want: "OK [OVER/0/1 OK/1/2]"},
				{req: rlReq("api", desc("quota_a", "1"), desc("quota_b", "1")), want: "OK [OVER/0/1 OK/0/2]"},
				// every quota descriptor fails: refused
				{req: rlReq("api", desc("quota_a", "1"), desc("quota_b", "1")), want: "OVER [OVER/0/1 OVER/0/2]"},
				// a normal descriptor fails: refused though a quota passes
				{req: &pb.RateLimitRequest{Domain: "api", HitsAddend: 3, Descriptors: []*rlv3.RateLimitDescriptor{desc("user", "q")}}, want: "OK [OK/0/3]"},
				{req: rlReq("api", desc("user", "q"), desc("quota_b", "2")), want: "OVER [OVER/0/3 OK/2/2]"},
				{req: rlReq("api", desc("ip", "q"), desc("quota_b", "2")), want: "OK [OK/9/10 OK/1/2]"},
			},
		},
		{
			name: "unknown domain and unmatched descriptors",
			steps: []step{
				{req: rlReq("nope", desc("user", "u")), want: "OK [OK/-]"},
				{req: rlReq("api", desc("nothing", "u"), desc("user", "u", "extra", "x")), want: "OK [OK/- OK/-]"},
			},
			check: func(t *testing.T, st *fakeStore) {
				if n := st.callCount(); n != 0 {
					t.Errorf("store calls = %d, want 0", n)
				}
			},
		},
		{
			name: "unlimited and deny never touch the store",
			steps: []step{
				{req: rlReq("api", desc("free", "f")), want: fmt.Sprintf("OK [OK/%d/-]", maxU32)},
				{req: rlReq("api", desc("blocked", "b")), want: "OVER [OVER/0/0]"},
				{req: rlReq("api", withHits(desc("blocked", "b"), 0)), want: "OVER [OVER/0/0]"},
				{req: rlReq("api", negative(desc("blocked", "b"), 1)), want: "OK [OK/0/0]"},
			},
			check: func(t *testing.T, st *fakeStore) {
				if n := st.callCount(); n != 0 {
					t.Errorf("store calls = %d, want 0", n)
				}
			},
		},
		{
			name: "deny refuses the whole request without debiting",
			steps: []step{
				{req: rlReq("api", desc("user", "d"), desc("blocked", "b")), want: "OVER [OK/3/3 OVER/0/0]"},
				{req: rlReq("api", desc("user", "d")), want: "OK [OK/2/3]"},
			},
		},
		{
			name: "several limits report the most restrictive",
			steps: []step{
				{req: rlReq("api", desc("model", "m")), want: "OK [OK/1/2]"},
				{req: rlReq("api", desc("model", "m")), want: "OK [OK/0/2]"},
				{req: rlReq("api", desc("model", "m")), want: "OVER [OVER/0/2]"},
			},
			check: func(t *testing.T, st *fakeStore) {
				if got := st.tokens("model=m", "rpm"); got != 3 {
					t.Errorf("rpm tokens = %d, want 3", got)
				}
			},
		},
		{
			name: "post charge debits past zero and refuses while in debt",
			steps: []step{
				{req: rlReq("api", withHits(desc("tokens", "t"), 0)), want: "OK [OK/100/100]"},
				{req: rlReq("api", withHits(desc("tokens", "t"), 150)), want: "OVER [OVER/0/100]"},
				{req: rlReq("api", withHits(desc("tokens", "t"), 0)), want: "OVER [OVER/0/100]"},
				{req: rlReq("api", withHits(desc("tokens", "t"), 0)), advance: 31 * time.Second, want: "OK [OK/1/100]"},
			},
		},
		{
			name:  "a descriptor's own hits_addend is charged: Envoy Gateway's usage-based sequence",
			steps: usageSteps("usage", "OVER [OVER/0/21]"),
			check: func(t *testing.T, st *fakeStore) {
				if got := st.tokens("usage=u", "default"); got != -9 {
					t.Errorf("tokens = %d, want -9 (the third charge landed past zero)", got)
				}
			},
		},
		{
			name:  "DESCRIPTOR_HITS_ADDEND=consume: the overshooting charge is refused and not debited",
			opts:  []Option{WithDescriptorHitsCharge(false)},
			steps: usageSteps("usage", "OK [OK/1/21]"),
			check: func(t *testing.T, st *fakeStore) {
				if got := st.tokens("usage=u", "default"); got != 1 {
					t.Errorf("tokens = %d, want 1 (the refused charge debited nothing)", got)
				}
			},
		},
		{
			name:  "charge: pre keeps a descriptor's own hits all-or-nothing",
			steps: usageSteps("usage_pre", "OK [OK/1/21]"),
			check: func(t *testing.T, st *fakeStore) {
				if got := st.tokens("usage_pre=u", "tph"); got != 1 {
					t.Errorf("tokens = %d, want 1 (the refused charge debited nothing)", got)
				}
			},
		},
		{
			name: "the request's hits_addend stays all-or-nothing",
			steps: []step{
				{req: &pb.RateLimitRequest{Domain: "api", HitsAddend: 11, Descriptors: []*rlv3.RateLimitDescriptor{desc("ip", "r")}}, want: "OVER [OVER/0/10]"},
				{req: rlReq("api", desc("ip", "r")), want: "OK [OK/9/10]"},
			},
		},
		{
			name: "unit multiplier",
			steps: []step{
				{req: rlReq("api", desc("window", "w")), want: "OK [OK/5/6]"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := newFakeStore()
			cfg := mustConfig(t, testConfig)
			svc := New(st, func() *descriptors.Config { return cfg }, tt.opts...)
			runSteps(t, svc, st, tt.steps)
			if tt.check != nil {
				tt.check(t, st)
			}
		})
	}
}

func TestOnePlanPerRequest(t *testing.T) {
	st := newFakeStore()
	cfg := mustConfig(t, testConfig)
	svc := New(st, func() *descriptors.Config { return cfg })
	req := rlReq("api", desc("user", "p"), desc("model", "p"), desc("free", "p"), desc("shadow", "p"), desc("quota_a", "p"), negative(desc("ip", "p"), 1), withHits(desc("tokens", "p"), 7))
	if _, err := svc.ShouldRateLimit(context.Background(), req); err != nil {
		t.Fatalf("ShouldRateLimit() error = %v", err)
	}
	if len(st.plans) != 1 {
		t.Fatalf("store calls = %d, want 1", len(st.plans))
	}
	type d struct {
		entity, limit string
		amount        int64
		op            cascade.Op
		role          cascade.Role
	}
	var got []d
	for _, x := range st.plans[0].Debits {
		if x.Key.Namespace != "" || x.Key.Resource != "api" {
			t.Errorf("debit key = %+v, want namespace \"\" (the deployment's), resource api", x.Key)
		}
		got = append(got, d{x.Key.Entity, x.Limit, int64(x.Amount), x.Op, x.Role})
	}
	want := []d{
		{"user=p", "default", 1000, cascade.Consume, cascade.Enforce},
		{"model=p", "rpm", 1000, cascade.Consume, cascade.Enforce},
		{"model=p", "tpd", 1000, cascade.Consume, cascade.Enforce},
		{"shadow=p", "default", 1000, cascade.Consume, cascade.Advisory},
		{"quota_a=p", "default", 1000, cascade.Consume, cascade.Quota},
		{"ip=p", "default", 1000, cascade.Refund, cascade.Enforce},
		{"tokens=p", "tpm", 7000, cascade.Charge, cascade.Enforce},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("plan debits =\n%v\nwant\n%v", got, want)
	}
}

func TestResponseFields(t *testing.T) {
	st := newFakeStore()
	cfg := mustConfig(t, testConfig)
	svc := New(st, func() *descriptors.Config { return cfg })
	resp, err := svc.ShouldRateLimit(context.Background(), rlReq("api", desc("window", "w"), desc("model", "m")))
	if err != nil {
		t.Fatalf("ShouldRateLimit() error = %v", err)
	}
	w := resp.GetStatuses()[0]
	if got := w.GetCurrentLimit().GetUnit(); got != pb.RateLimitResponse_RateLimit_SECOND {
		t.Errorf("window unit = %v, want SECOND", got)
	}
	if got := w.GetCurrentLimit().GetUnitMultiplier().GetValue(); got != 30 {
		t.Errorf("window unit_multiplier = %d, want 30", got)
	}
	// 6 per 30 s: one token back in 5 s.
	if got := w.GetDurationUntilReset().AsDuration(); got != 5*time.Second {
		t.Errorf("window duration_until_reset = %v, want 5s", got)
	}
	m := resp.GetStatuses()[1]
	if got := m.GetCurrentLimit().GetName(); got != "tpd" {
		t.Errorf("model current_limit name = %q, want tpd (the most restrictive)", got)
	}
	if m.GetCurrentLimit().GetUnitMultiplier() != nil {
		t.Errorf("model unit_multiplier = %v, want unset", m.GetCurrentLimit().GetUnitMultiplier())
	}
	if got := m.GetDurationUntilReset().AsDuration(); got != 12*time.Hour {
		t.Errorf("model duration_until_reset = %v, want 12h", got)
	}
}

func TestResponseHeaders(t *testing.T) {
	tests := []struct {
		name    string
		opts    []Option
		reqs    []*pb.RateLimitRequest
		want    string
		wantOff bool
	}{
		{
			name: "default names from the most restrictive descriptor",
			opts: []Option{WithResponseHeaders(true, "", "", "")},
			reqs: []*pb.RateLimitRequest{rlReq("api", desc("ip", "1"), desc("user", "1"))},
			want: "RateLimit-Limit: 3, RateLimit-Remaining: 2, RateLimit-Reset: 20",
		},
		{
			name: "refused reports the retry-after",
			opts: []Option{WithResponseHeaders(true, "X-Limit", "X-Remaining", "X-Reset")},
			reqs: []*pb.RateLimitRequest{
				{Domain: "api", HitsAddend: 3, Descriptors: []*rlv3.RateLimitDescriptor{desc("user", "2")}},
				rlReq("api", desc("ip", "2"), desc("user", "2")),
			},
			want: "X-Limit: 3, X-Remaining: 0, X-Reset: 20",
		},
		{
			name: "enforced refusal beats a quota refusal",
			opts: []Option{WithResponseHeaders(true, "", "", ""), WithDescriptorHitsCharge(false)},
			reqs: []*pb.RateLimitRequest{
				rlReq("api", desc("quota_a", "3")),
				rlReq("api", desc("quota_a", "3"), withHits(desc("ip", "3"), 11)),
			},
			want: "RateLimit-Limit: 10, RateLimit-Remaining: 0, RateLimit-Reset: 6",
		},
		{
			name: "a zero-rate rule reports its unit's period",
			opts: []Option{WithResponseHeaders(true, "", "", "")},
			reqs: []*pb.RateLimitRequest{rlReq("api", desc("blocked", "5"))},
			want: "RateLimit-Limit: 0, RateLimit-Remaining: 0, RateLimit-Reset: 60",
		},
		{
			name:    "disabled",
			reqs:    []*pb.RateLimitRequest{rlReq("api", desc("user", "4"))},
			wantOff: true,
		},
		{
			name:    "no limited descriptor",
			opts:    []Option{WithResponseHeaders(true, "", "", "")},
			reqs:    []*pb.RateLimitRequest{rlReq("api", desc("free", "4"))},
			wantOff: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := mustConfig(t, testConfig)
			svc := New(newFakeStore(), func() *descriptors.Config { return cfg }, tt.opts...)
			var resp *pb.RateLimitResponse
			for _, r := range tt.reqs {
				var err error
				if resp, err = svc.ShouldRateLimit(context.Background(), r); err != nil {
					t.Fatalf("ShouldRateLimit() error = %v", err)
				}
			}
			var parts []string
			for _, h := range resp.GetResponseHeadersToAdd() {
				parts = append(parts, h.GetKey()+": "+h.GetValue())
			}
			got := strings.Join(parts, ", ")
			if tt.wantOff {
				if got != "" {
					t.Errorf("headers = %q, want none", got)
				}
				return
			}
			if got != tt.want {
				t.Errorf("headers = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestDynamicMetadata: the default metadata is envoyproxy/ratelimit's (at
// f2fb157): the request, a limit override in its text form, and the
// metadata of the rules that passed (not unlimited, not OVER_LIMIT: shadow
// mode passes, quota mode over its limit does not); extended adds the
// quota-mode fields and overrides as structs.
func TestDynamicMetadata(t *testing.T) {
	override := &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 7, Unit: typev3.RateLimitUnit_HOUR, UnitMultiplier: wrapperspb.UInt32(2)}
	// The old service writes the override's String(), protobuf's text form,
	// whose spacing protobuf varies from build to build on purpose.
	text, err := json.Marshal(override.String())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name           string
		reqs           []*pb.RateLimitRequest
		want, extended string
	}{
		{
			name: "the request; an unlimited rule's metadata is not returned",
			reqs: []*pb.RateLimitRequest{{
				Domain:     "api",
				HitsAddend: 2,
				Descriptors: []*rlv3.RateLimitDescriptor{
					desc("user", "a", "x", "y"),
					withHits(desc("free", "f"), 0),
				},
			}},
			want:     `{"descriptors":[{"entries":["user=a","x=y"]},{"entries":["free=f"],"hitsAddend":0}],"domain":"api","hitsAddend":2}`,
			extended: `{"descriptors":[{"entries":["user=a","x=y"]},{"entries":["free=f"],"hitsAddend":0}],"domain":"api","hitsAddend":2,"quotaModeEnabled":false}`,
		},
		{
			name: "a quota-mode rule over its limit does not pass",
			reqs: []*pb.RateLimitRequest{
				rlReq("api", desc("quota_a", "m")),
				rlReq("api", desc("user", "m"), desc("quota_a", "m"), desc("quota_b", "m")),
			},
			want:     `{"descriptors":[{"entries":["user=m"]},{"entries":["quota_a=m"]},{"entries":["quota_b=m"]}],"domain":"api","metadata":{"backend":"b"}}`,
			extended: `{"descriptors":[{"entries":["user=m"]},{"entries":["quota_a=m"]},{"entries":["quota_b=m"]}],"domain":"api","metadata":{"backend":"b"},"quotaModeEnabled":true,"quotaModeViolations":[1]}`,
		},
		{
			name: "a quota-mode rule over its limit, the only one: refused, no metadata",
			reqs: []*pb.RateLimitRequest{
				rlReq("api", desc("quota_b", "z")),
				rlReq("api", desc("quota_b", "z")),
				rlReq("api", desc("quota_b", "z")),
			},
			want:     `{"descriptors":[{"entries":["quota_b=z"]}],"domain":"api"}`,
			extended: `{"descriptors":[{"entries":["quota_b=z"]}],"domain":"api","quotaModeEnabled":true,"quotaModeViolations":[0]}`,
		},
		{
			name: "a shadow-mode rule over its limit passes",
			reqs: []*pb.RateLimitRequest{
				rlReq("api", desc("shadow", "s")),
				rlReq("api", desc("shadow", "s")),
			},
			want:     `{"descriptors":[{"entries":["shadow=s"]}],"domain":"api","metadata":{"audit":"shadow"}}`,
			extended: `{"descriptors":[{"entries":["shadow=s"]}],"domain":"api","metadata":{"audit":"shadow"},"quotaModeEnabled":false}`,
		},
		{
			name: "an enforced rule over its limit does not pass",
			reqs: []*pb.RateLimitRequest{
				{Domain: "api", HitsAddend: 100, Descriptors: []*rlv3.RateLimitDescriptor{desc("meta_a", "o")}},
				rlReq("api", desc("meta_a", "o"), desc("shadow", "o")),
			},
			want:     `{"descriptors":[{"entries":["meta_a=o"]},{"entries":["shadow=o"]}],"domain":"api","metadata":{"audit":"shadow"}}`,
			extended: `{"descriptors":[{"entries":["meta_a=o"]},{"entries":["shadow=o"]}],"domain":"api","metadata":{"audit":"shadow"},"quotaModeEnabled":false}`,
		},
		{
			name:     "nested metadata merges in request order, the first key wins",
			reqs:     []*pb.RateLimitRequest{rlReq("api", desc("meta_a", "n"), desc("meta_b", "n"))},
			want:     `{"descriptors":[{"entries":["meta_a=n"]},{"entries":["meta_b=n"]}],"domain":"api","metadata":{"route":{"name":"a","tier":"gold","zone":"eu"},"tier":"x"}}`,
			extended: `{"descriptors":[{"entries":["meta_a=n"]},{"entries":["meta_b=n"]}],"domain":"api","metadata":{"route":{"name":"a","tier":"gold","zone":"eu"},"tier":"x"},"quotaModeEnabled":false}`,
		},
		{
			name:     "limit override",
			reqs:     []*pb.RateLimitRequest{rlReq("api", &rlv3.RateLimitDescriptor{Entries: desc("user", "o").Entries, Limit: override})},
			want:     `{"descriptors":[{"entries":["user=o"],"limit":` + string(text) + `}],"domain":"api"}`,
			extended: `{"descriptors":[{"entries":["user=o"],"limit":{"requestsPerUnit":7,"unit":"HOUR","unitMultiplier":2}}],"domain":"api","quotaModeEnabled":false}`,
		},
	}
	for _, tt := range tests {
		for _, extended := range []bool{false, true} {
			want := map[bool]string{false: tt.want, true: tt.extended}[extended]
			t.Run(fmt.Sprintf("%s/extended=%t", tt.name, extended), func(t *testing.T) {
				cfg := mustConfig(t, testConfig)
				svc := New(newFakeStore(), func() *descriptors.Config { return cfg }, WithDynamicMetadata(true), WithExtendedMetadata(extended))
				var resp *pb.RateLimitResponse
				for _, r := range tt.reqs {
					var err error
					if resp, err = svc.ShouldRateLimit(context.Background(), r); err != nil {
						t.Fatalf("ShouldRateLimit() error = %v", err)
					}
				}
				if got := canonicalJSON(t, resp.GetDynamicMetadata()); got != want {
					t.Errorf("dynamic_metadata =\n%s\nwant\n%s", got, want)
				}
			})
		}
	}
	t.Run("disabled", func(t *testing.T) {
		cfg := mustConfig(t, testConfig)
		svc := New(newFakeStore(), func() *descriptors.Config { return cfg })
		resp, err := svc.ShouldRateLimit(context.Background(), rlReq("api", desc("user", "a")))
		if err != nil || resp.GetDynamicMetadata() != nil {
			t.Errorf("ShouldRateLimit() = metadata %v, err %v, want none", resp.GetDynamicMetadata(), err)
		}
	})
}

// canonicalJSON renders a proto message as compact JSON with sorted keys.
func canonicalJSON(t *testing.T, m proto.Message) string {
	t.Helper()
	b, err := protojson.Marshal(m)
	if err != nil {
		t.Fatalf("protojson.Marshal() error = %v", err)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("json.Unmarshal(%s) error = %v", b, err)
	}
	out, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("json.Marshal() error = %v", err)
	}
	return string(out)
}

// counterValue returns the value of the counter name{labels} in reg, or -1.
func counterValue(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	return harness.CounterValue(t, reg, name, labels)
}

func TestOnUnavailable(t *testing.T) {
	tests := []struct {
		name        string
		opts        []Option
		req         *pb.RateLimitRequest
		want        string
		wantAllowed float64
		wantBlocked float64
	}{
		{"allow", nil, rlReq("api", desc("user", "u"), desc("nothing", "x")), "OK [OK/0/3 OK/-]", 1, 0},
		{"block", []Option{WithOnUnavailable(true)}, rlReq("api", desc("user", "u"), desc("free", "x")), fmt.Sprintf("OVER [OVER/0/3 OK/%d/-]", uint32(math.MaxUint32)), 0, 1},
		{"block but only shadow limits", []Option{WithOnUnavailable(true)}, rlReq("api", desc("shadow", "u")), "OK [OK/0/1]", 1, 0},
		{"block under global shadow", []Option{WithOnUnavailable(true), WithShadowMode(true)}, rlReq("api", desc("user", "u")), "OK [OK/0/3]", 1, 0},
		{"allow with a deny limit", nil, rlReq("api", desc("user", "u"), desc("blocked", "x")), "OVER [OK/0/3 OVER/0/0]", 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := newFakeStore()
			st.setErr(errDown)
			reg := prometheus.NewRegistry()
			m := metrics.New(reg)
			logger, hook := logtest.NewNullLogger()
			cfg := mustConfig(t, testConfig)
			opts := append([]Option{WithMetrics(m), WithLogger(logrus.NewEntry(logger))}, tt.opts...)
			svc := New(st, func() *descriptors.Config { return cfg }, opts...)
			resp, err := svc.ShouldRateLimit(context.Background(), tt.req)
			if err != nil {
				t.Fatalf("ShouldRateLimit() error = %v", err)
			}
			if got := respString(resp); got != tt.want {
				t.Errorf("ShouldRateLimit() = %s, want %s", got, tt.want)
			}
			if len(hook.AllEntries()) != 1 {
				t.Fatalf("log entries = %d, want 1", len(hook.AllEntries()))
			}
			e := hook.LastEntry()
			if e.Data["component"] != "service" || e.Data["on_unavailable"] == nil || e.Data[logrus.ErrorKey] == nil {
				t.Errorf("log entry fields = %v, want component, on_unavailable and error", e.Data)
			}
			gotAllowed := counterValue(t, reg, "ratelimit_on_unavailable_total", map[string]string{"decision": "allowed"})
			gotBlocked := counterValue(t, reg, "ratelimit_on_unavailable_total", map[string]string{"decision": "blocked"})
			if gotAllowed != tt.wantAllowed || gotBlocked != tt.wantBlocked {
				t.Errorf("on_unavailable allowed, blocked = %v, %v, want %v, %v", gotAllowed, gotBlocked, tt.wantAllowed, tt.wantBlocked)
			}
		})
	}
}

// TestStoreRefusesValue has the store refuse a plan it cannot hold (a
// value past its size limit): the answer is InvalidArgument, counted as an
// invalid request, never decided by ON_UNAVAILABLE.
func TestStoreRefusesValue(t *testing.T) {
	st := newFakeStore()
	st.setErr(fmt.Errorf("dynamo: debit 0: entity of 20000 bytes, at most 16384: %w", cascade.ErrInvalid))
	reg := prometheus.NewRegistry()
	cfg := mustConfig(t, testConfig)
	svc := New(st, func() *descriptors.Config { return cfg }, WithMetrics(metrics.New(reg)))
	_, err := svc.ShouldRateLimit(context.Background(), rlReq("api", desc("user", "u")))
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "at most 16384") {
		t.Errorf("ShouldRateLimit() error = %v, want InvalidArgument with the store's reason", err)
	}
	if got := counterValue(t, reg, "ratelimit_invalid_requests_total", map[string]string{"reason": "unstorable"}); got != 1 {
		t.Errorf("invalid requests (unstorable) = %v, want 1", got)
	}
	if got := counterValue(t, reg, "ratelimit_on_unavailable_total", map[string]string{"decision": "allowed"}); got != 0 {
		t.Errorf("on_unavailable allowed = %v, want 0", got)
	}
}

func TestInvalidArgument(t *testing.T) {
	huge := &rlv3.RateLimitDescriptor{Entries: desc("user", "x").Entries, HitsAddend: wrapperspb.UInt64(MaxHits + 1)}
	tests := []struct {
		name string
		req  *pb.RateLimitRequest
		want string
	}{
		{"nil request", nil, "domain must not be empty"},
		{"empty domain", rlReq("", desc("user", "x")), "domain must not be empty"},
		{"no descriptors", rlReq("api"), "descriptor list must not be empty"},
		{"descriptor without entries", rlReq("api", desc("user", "x"), desc()), "descriptor 1 has no entries"},
		{"nil descriptor", rlReq("api", nil), "descriptor 0 has no entries"},
		{"empty key", rlReq("api", desc("user", "x", "", "y")), "descriptor 0 entry 1 has an empty key"},
		{"hits overflow", rlReq("api", huge), "exceed 1000000000000"},
		{"override without unit", rlReq("api", &rlv3.RateLimitDescriptor{Entries: desc("user", "x").Entries, Limit: &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1}}), "limit override has no valid unit"},
		{"override period overflow", rlReq("api", &rlv3.RateLimitDescriptor{Entries: desc("user", "x").Entries, Limit: &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_YEAR, UnitMultiplier: wrapperspb.UInt32(math.MaxUint32)}}), "period overflows"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := newFakeStore()
			cfg := mustConfig(t, testConfig)
			svc := New(st, func() *descriptors.Config { return cfg })
			resp, err := svc.ShouldRateLimit(context.Background(), tt.req)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tt.want) {
				t.Errorf("ShouldRateLimit() = %v, %v, want InvalidArgument containing %q", resp, err, tt.want)
			}
			if st.callCount() != 0 {
				t.Errorf("store calls = %d, want 0", st.callCount())
			}
		})
	}
}

func TestNoConfiguration(t *testing.T) {
	svc := New(newFakeStore(), func() *descriptors.Config { return nil })
	_, err := svc.ShouldRateLimit(context.Background(), rlReq("api", desc("user", "x")))
	if status.Code(err) != codes.Unavailable {
		t.Errorf("ShouldRateLimit() without config error = %v, want Unavailable", err)
	}
}

func TestCanceledContext(t *testing.T) {
	st := newFakeStore()
	st.setErr(context.Canceled)
	cfg := mustConfig(t, testConfig)
	svc := New(st, func() *descriptors.Config { return cfg })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := svc.ShouldRateLimit(ctx, rlReq("api", desc("user", "x")))
	if status.Code(err) != codes.Canceled {
		t.Errorf("ShouldRateLimit(canceled) error = %v, want Canceled", err)
	}
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	st := newFakeStore()
	cfg := mustConfig(t, testConfig)
	svc := New(Instrument(st, m), func() *descriptors.Config { return cfg }, WithMetrics(m), WithNearLimitRatio(0.5))
	reqs := []*pb.RateLimitRequest{
		rlReq("api", desc("user", "a")),                  // within, used 1 of 3 (threshold 1): not near
		rlReq("api", desc("user", "a")),                  // within, near 1
		rlReq("api", desc("user", "a")),                  // within, near 1
		rlReq("api", desc("user", "a")),                  // over
		rlReq("api", desc("shadow", "a")),                // within
		rlReq("api", desc("shadow", "a")),                // over + shadow
		rlReq("api", desc("user_detail", "secret")),      // detailed metric key
		rlReq("nowhere", desc("user", "a")),              // unknown domain
		rlReq("api", desc("user", "")),                   // within for a new entity
		rlReq("", desc("user", "a")),                     // invalid
		rlReq("api", negative(desc("user", "zz"), 1)),    // refunds are not hits
		rlReq("api", withHits(desc("user", "zz2"), 0)),   // checks are zero hits
		rlReq("api", desc("blocked", "b")),               // deny: over
		rlReq("api", desc("free", "f"), desc("ip", "x")), // unlimited has no counters
	}
	for _, r := range reqs {
		_, _ = svc.ShouldRateLimit(context.Background(), r)
	}
	want := `
# HELP ratelimit_decisions_total Rate-limit decisions by domain and overall response code.
# TYPE ratelimit_decisions_total counter
ratelimit_decisions_total{code="OK",domain="api"} 10
ratelimit_decisions_total{code="OK",domain="unknown"} 1
ratelimit_decisions_total{code="OVER_LIMIT",domain="api"} 2
ratelimit_decisions_total{code="OVER_LIMIT",domain="unknown"} 0
# HELP ratelimit_invalid_requests_total Requests refused with InvalidArgument, by reason.
# TYPE ratelimit_invalid_requests_total counter
ratelimit_invalid_requests_total{reason="empty_domain"} 1
# HELP ratelimit_rule_hits_total Hits seen by each rule (key is the rule's descriptor key path).
# TYPE ratelimit_rule_hits_total counter
ratelimit_rule_hits_total{key="api.blocked"} 1
ratelimit_rule_hits_total{key="api.ip"} 1
ratelimit_rule_hits_total{key="api.shadow"} 2
ratelimit_rule_hits_total{key="api.user"} 5
ratelimit_rule_hits_total{key="api.user_detail_secret"} 1
# HELP ratelimit_rule_near_limit_hits_total Admitted hits above each rule's near-limit threshold.
# TYPE ratelimit_rule_near_limit_hits_total counter
ratelimit_rule_near_limit_hits_total{key="api.blocked"} 0
ratelimit_rule_near_limit_hits_total{key="api.ip"} 0
ratelimit_rule_near_limit_hits_total{key="api.shadow"} 1
ratelimit_rule_near_limit_hits_total{key="api.user"} 2
ratelimit_rule_near_limit_hits_total{key="api.user_detail_secret"} 0
# HELP ratelimit_rule_over_limit_hits_total Hits over each rule's limit.
# TYPE ratelimit_rule_over_limit_hits_total counter
ratelimit_rule_over_limit_hits_total{key="api.blocked"} 1
ratelimit_rule_over_limit_hits_total{key="api.ip"} 0
ratelimit_rule_over_limit_hits_total{key="api.shadow"} 1
ratelimit_rule_over_limit_hits_total{key="api.user"} 1
ratelimit_rule_over_limit_hits_total{key="api.user_detail_secret"} 0
# HELP ratelimit_rule_shadow_mode_hits_total Hits over each rule's limit that shadow mode let through.
# TYPE ratelimit_rule_shadow_mode_hits_total counter
ratelimit_rule_shadow_mode_hits_total{key="api.blocked"} 0
ratelimit_rule_shadow_mode_hits_total{key="api.ip"} 0
ratelimit_rule_shadow_mode_hits_total{key="api.shadow"} 1
ratelimit_rule_shadow_mode_hits_total{key="api.user"} 0
ratelimit_rule_shadow_mode_hits_total{key="api.user_detail_secret"} 0
# HELP ratelimit_rule_within_limit_hits_total Hits within each rule's limit.
# TYPE ratelimit_rule_within_limit_hits_total counter
ratelimit_rule_within_limit_hits_total{key="api.blocked"} 0
ratelimit_rule_within_limit_hits_total{key="api.ip"} 1
ratelimit_rule_within_limit_hits_total{key="api.shadow"} 1
ratelimit_rule_within_limit_hits_total{key="api.user"} 4
ratelimit_rule_within_limit_hits_total{key="api.user_detail_secret"} 1
`
	names := []string{
		"ratelimit_decisions_total", "ratelimit_invalid_requests_total",
		"ratelimit_rule_hits_total", "ratelimit_rule_near_limit_hits_total",
		"ratelimit_rule_over_limit_hits_total", "ratelimit_rule_shadow_mode_hits_total",
		"ratelimit_rule_within_limit_hits_total",
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Errorf("metrics differ: %v", err)
	}
	if n, err := testutil.GatherAndCount(reg, "ratelimit_store_duration_seconds"); err != nil || n != 3 {
		t.Errorf("store latency series = %d, %v, want 3", n, err)
	}
}

func TestThrottleLetsOneEventPerInterval(t *testing.T) {
	var th throttle
	t0 := time.Unix(1_700_000_000, 0)
	steps := []struct {
		at             time.Duration
		ok             bool
		wantSuppressed int64
	}{
		{0, true, 0},
		{10 * time.Millisecond, false, 0},
		{900 * time.Millisecond, false, 0},
		{time.Second, true, 2},
		{time.Second + time.Millisecond, false, 0},
		{3 * time.Second, true, 1},
	}
	for _, st := range steps {
		ok, suppressed := th.allow(t0.Add(st.at), time.Second)
		if ok != st.ok || (ok && suppressed != st.wantSuppressed) {
			t.Errorf("allow(+%v) = %v, %d, want %v, %d", st.at, ok, suppressed, st.ok, st.wantSuppressed)
		}
	}
}

func TestDescribe(t *testing.T) {
	tests := []struct {
		name     string
		requests uint64
		period   time.Duration
		wantRPU  uint64
		wantUnit descriptors.Unit
		wantMult uint32
	}{
		{"per minute", 5, time.Minute, 5, descriptors.Minute, 1},
		{"per hour", 1000, time.Hour, 1000, descriptors.Hour, 1},
		{"per day", 10, 24 * time.Hour, 10, descriptors.Day, 1},
		{"two weeks", 3, 14 * 24 * time.Hour, 3, descriptors.Week, 2},
		{"ninety seconds", 7, 90 * time.Second, 7, descriptors.Second, 90},
		{"half a second", 5, 500 * time.Millisecond, 10, descriptors.Second, 1},
		{"odd period", 3, 1500 * time.Millisecond, 2, descriptors.Second, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := tokenbucket.Rate(tt.requests, tt.period, 0)
			if err != nil {
				t.Fatal(err)
			}
			rpu, unit, mult := describe(b)
			if rpu != tt.wantRPU || unit != tt.wantUnit || mult != tt.wantMult {
				t.Errorf("describe(%d per %v) = %d, %v, %d, want %d, %v, %d", tt.requests, tt.period, rpu, unit, mult, tt.wantRPU, tt.wantUnit, tt.wantMult)
			}
		})
	}
}

// overridingStore decides on a limit of its own in place of the plan's, as
// the DynamoDB store does with a stored per-entity override.
type overridingStore struct {
	inner  *fakeStore
	bucket tokenbucket.Limit
}

func (o overridingStore) Acquire(ctx context.Context, p *cascade.Plan) (cascade.Decision, error) {
	q := &cascade.Plan{Debits: append([]cascade.Debit(nil), p.Debits...)}
	for i := range q.Debits {
		q.Debits[i].Bucket = o.bucket
	}
	return o.inner.Acquire(ctx, q)
}

func TestCurrentLimitReportsTheAppliedLimit(t *testing.T) {
	cfg := mustConfig(t, testConfig)
	five, err := tokenbucket.Rate(5, time.Hour, 0)
	if err != nil {
		t.Fatal(err)
	}
	svc := New(overridingStore{inner: newFakeStore(), bucket: five}, func() *descriptors.Config { return cfg })
	resp, err := svc.ShouldRateLimit(context.Background(), rlReq("api", desc("user", "alice")))
	if err != nil {
		t.Fatal(err)
	}
	st := resp.GetStatuses()[0]
	if got := st.GetCurrentLimit(); got.GetRequestsPerUnit() != 5 || got.GetUnit() != pb.RateLimitResponse_RateLimit_HOUR {
		t.Errorf("current_limit = %v, want the applied 5 per HOUR, not the rule's 3 per MINUTE", got)
	}
	if got := st.GetLimitRemaining(); got != 4 {
		t.Errorf("limit_remaining = %d, want 4", got)
	}
}

// TestDebitNamespace wants each debit's namespace to be its rule file's
// `namespace:`, and empty (the deployment's, which the store resolves) for a
// rule from a file without one and for a limit the request overrides.
func TestDebitNamespace(t *testing.T) {
	files := []descriptors.File{
		{Name: "own.yaml", Data: []byte("namespace: team-x\ndomain: own\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 5}\n")},
		{Name: "plain.yaml", Data: []byte("domain: plain\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 5}\n")},
	}
	cfg, err := descriptors.Parse(files, descriptors.Options{})
	if err != nil {
		t.Fatalf("descriptors.Parse() = %v", err)
	}
	override := &rlv3.RateLimitDescriptor{Entries: desc("other", "o").Entries, Limit: &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: typev3.RateLimitUnit_MINUTE}}
	cases := []struct {
		name string
		req  *pb.RateLimitRequest
		want string
	}{
		{"file with namespace", rlReq("own", desc("user", "u")), "team-x"},
		{"file without namespace", rlReq("plain", desc("user", "u")), ""},
		{"request override", rlReq("plain", override), ""},
		{"request override in a file with namespace", rlReq("own", override), ""},
	}
	for _, c := range cases {
		st := newFakeStore()
		svc := New(st, func() *descriptors.Config { return cfg })
		if _, err := svc.ShouldRateLimit(context.Background(), c.req); err != nil {
			t.Fatalf("%s: ShouldRateLimit() = %v", c.name, err)
		}
		if len(st.plans) != 1 || len(st.plans[0].Debits) != 1 {
			t.Fatalf("%s: plans = %+v, want one plan of one debit", c.name, st.plans)
		}
		if got := st.plans[0].Debits[0].Key.Namespace; got != c.want {
			t.Errorf("%s: debit namespace = %q, want %q", c.name, got, c.want)
		}
	}
}
