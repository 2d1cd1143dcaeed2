package service

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dynalimit/dynalimit/internal/metrics"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/descriptors"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// chainConfig is a configured chain: tenant (5 a minute) → project (no
// limit of its own) → API key (3 a minute) that cascades, under a route.
const chainConfig = `
domain: llm
descriptors:
  - key: route
    value: chat
    descriptors:
      - key: tenant
        entity: true
        rate_limit: {unit: minute, requests_per_unit: 5}
        descriptors:
          - key: project
            entity: true
            descriptors:
              - key: api_key
                entity: true
                cascade: true
                rate_limit: {unit: minute, requests_per_unit: 3}
  - key: tenant
    entity: true
    rate_limit: {unit: minute, requests_per_unit: 50}
    descriptors:
      - key: api_key
        entity: true
        rate_limit: {unit: minute, requests_per_unit: 2}
  - key: org
    entity: true
    descriptors:
      - key: user
        entity: true
        cascade: true
        limits:
          - {name: rpm, unit: minute, requests_per_unit: 4}
`

func chainReq(tenant, project, key string) *pb.RateLimitRequest {
	return rlReq("llm", desc("route", "chat", "tenant", tenant, "project", project, "api_key", key))
}

func TestConfiguredChain(t *testing.T) {
	tests := []struct {
		name  string
		steps []step
		check func(t *testing.T, st *fakeStore)
	}{
		{
			name: "two keys under one tenant: the tenant's 5 refuses the sixth",
			steps: []step{
				{req: chainReq("t1", "p1", "k1"), want: "OK [OK/2/3]"},
				{req: chainReq("t1", "p1", "k1"), want: "OK [OK/1/3]"},
				{req: chainReq("t1", "p1", "k2"), want: "OK [OK/2/3]"},
				{req: chainReq("t1", "p2", "k3"), want: "OK [OK/1/5]"},
				{req: chainReq("t1", "p2", "k3"), want: "OK [OK/0/5]"},
				{req: chainReq("t1", "p2", "k4"), want: "OVER [OVER/0/5]"},
				{req: chainReq("t2", "p1", "k9"), want: "OK [OK/2/3]"},
				// An entity is named by its value alone: k1 is one API key
				// whichever tenant the request names.
				{req: chainReq("t2", "p1", "k1"), want: "OK [OK/0/3]"},
			},
			check: func(t *testing.T, st *fakeStore) {
				if got := st.tokens("t1#route=chat", "default"); got != 0 {
					t.Errorf("tenant t1 tokens = %d, want 0", got)
				}
				if got := st.tokens("k2#route=chat", "default"); got != 2 {
					t.Errorf("key k2 tokens = %d, want 2", got)
				}
				if got := st.tokens("k4#route=chat", "default"); got != -1 {
					t.Errorf("key k4 tokens = %d, want no bucket (the refused request debited nothing)", got)
				}
			},
		},
		{
			name: "a key's own tighter limit refuses first and the tenant keeps its tokens",
			steps: []step{
				{req: chainReq("t3", "p1", "k1"), want: "OK [OK/2/3]"},
				{req: chainReq("t3", "p1", "k1"), want: "OK [OK/1/3]"},
				{req: chainReq("t3", "p1", "k1"), want: "OK [OK/0/3]"},
				{req: chainReq("t3", "p1", "k1"), want: "OVER [OVER/0/3]"},
				{req: chainReq("t3", "p1", "k2"), want: "OK [OK/1/5]"},
			},
		},
		{
			name: "without cascade the parent is not charged",
			steps: []step{
				{req: rlReq("llm", desc("tenant", "t9", "api_key", "k1")), want: "OK [OK/1/2]"},
				{req: rlReq("llm", desc("tenant", "t9", "api_key", "k2")), want: "OK [OK/1/2]"},
				{req: rlReq("llm", desc("tenant", "t9")), want: "OK [OK/49/50]"},
			},
		},
		{
			name: "a level without limits is in the chain and charges nothing",
			steps: []step{
				{req: rlReq("llm", desc("org", "o1", "user", "u1")), want: "OK [OK/3/4]"},
			},
			check: func(t *testing.T, st *fakeStore) {
				if got := st.tokens("o1", "default"); got != -1 {
					t.Errorf("org tokens = %d, want no bucket", got)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := newFakeStore()
			cfg := mustConfig(t, chainConfig)
			svc := New(st, func() *descriptors.Config { return cfg })
			runSteps(t, svc, st, tt.steps)
			if tt.check != nil {
				tt.check(t, st)
			}
		})
	}
}

// runSteps asks svc each step's request after advancing st's clock, and
// wants each answer's respString.
func runSteps(t *testing.T, svc *Service, st *fakeStore, steps []step) {
	t.Helper()
	for i, s := range steps {
		st.mu.Lock()
		st.clock.Advance(s.advance)
		st.mu.Unlock()
		resp, err := svc.ShouldRateLimit(context.Background(), s.req)
		if err != nil {
			t.Fatalf("step %d: ShouldRateLimit() error = %v", i, err)
		}
		if got := respString(resp); got != s.want {
			t.Errorf("step %d: ShouldRateLimit(%v) = %s, want %s", i, s.req, got, s.want)
		}
	}
}

func TestChainPlan(t *testing.T) {
	st := newFakeStore()
	cfg := mustConfig(t, chainConfig)
	svc := New(st, func() *descriptors.Config { return cfg })
	if _, err := svc.ShouldRateLimit(context.Background(), chainReq("t1", "p1", "k1")); err != nil {
		t.Fatal(err)
	}
	p := st.plans[0]
	var got []string
	for _, d := range p.Debits {
		got = append(got, fmt.Sprintf("%d %s|%s|%s %s", d.Depth, d.Key.Namespace, d.Key.Entity, d.Key.Resource, d.Limit))
	}
	want := []string{"0 |k1#route=chat|llm default", "2 |t1#route=chat|llm default"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("plan of a three-level chain = %q, want %q", got, want)
	}
}

func TestChainResponse(t *testing.T) {
	st := newFakeStore()
	cfg := mustConfig(t, chainConfig)
	reg := prometheus.NewRegistry()
	svc := New(st, func() *descriptors.Config { return cfg },
		WithResponseHeaders(true, "", "", ""), WithDynamicMetadata(true), WithMetrics(metrics.New(reg)))
	for _, k := range []string{"k1", "k2", "k3", "k4", "k5"} {
		if _, err := svc.ShouldRateLimit(context.Background(), chainReq("t1", "p1", k)); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := svc.ShouldRateLimit(context.Background(), chainReq("t1", "p1", "k6"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := respString(resp), "OVER [OVER/0/5]"; got != want {
		t.Fatalf("sixth request = %s, want %s", got, want)
	}
	hdr := map[string]string{}
	for _, h := range resp.GetResponseHeadersToAdd() {
		hdr[h.GetKey()] = h.GetValue()
	}
	if hdr["RateLimit-Limit"] != "5" || hdr["RateLimit-Remaining"] != "0" || hdr["RateLimit-Reset"] != "12" {
		t.Errorf("headers = %v, want the tenant's: limit 5, remaining 0, reset 12 (one token of 5 a minute)", hdr)
	}
	by := resp.GetDynamicMetadata().GetFields()["descriptors"].GetListValue().GetValues()[0].GetStructValue().GetFields()["refusedBy"].GetStructValue().GetFields()
	if by["key"].GetStringValue() != "tenant" || by["entity"].GetStringValue() != "t1" || by["depth"].GetNumberValue() != 2 {
		t.Errorf("metadata refusedBy = %v, want key tenant, entity t1, depth 2", by)
	}
	if got := counterValue(t, reg, "ratelimit_hierarchy_refusals_total", map[string]string{"depth": "2"}); got != 1 {
		t.Errorf("ratelimit_hierarchy_refusals_total{depth=2} = %v, want 1", got)
	}
}

func TestEmptyEntityIsInvalid(t *testing.T) {
	st := newFakeStore()
	cfg := mustConfig(t, chainConfig)
	svc := New(st, func() *descriptors.Config { return cfg })
	_, err := svc.ShouldRateLimit(context.Background(), chainReq("", "p1", "k1"))
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("empty tenant: error = %v, want InvalidArgument", err)
	}
	if st.callCount() != 0 {
		t.Errorf("store called %d times for an invalid request", st.callCount())
	}
}

// fakeHierarchy serves stored ancestors from a map of entity → parent,
// limits stored per entity, and an error on demand.
type fakeHierarchy struct {
	mu      sync.Mutex
	parents map[string]string
	limits  map[string][]cascade.NamedLimit
	err     error
	asked   []string
}

func (h *fakeHierarchy) Ancestors(_ context.Context, key cascade.Key, max int) ([]cascade.Ancestor, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.asked = append(h.asked, key.Entity)
	if h.err != nil {
		return nil, h.err
	}
	var out []cascade.Ancestor
	for id := h.parents[key.Entity]; id != "" && len(out) < max; id = h.parents[id] {
		out = append(out, cascade.Ancestor{Key: cascade.Key{Namespace: key.Namespace, Entity: id, Resource: key.Resource}, Limits: h.limits[id]})
	}
	return out, nil
}

func TestStoredAncestors(t *testing.T) {
	perMinute := func(n uint64) tokenbucket.Limit {
		l, err := tokenbucket.Rate(n, time.Minute, 0)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	newSvc := func(h *fakeHierarchy, opts ...Option) (*Service, *fakeStore) {
		st := newFakeStore()
		cfg := mustConfig(t, chainConfig)
		return New(st, func() *descriptors.Config { return cfg }, append(opts, WithHierarchy(h))...), st
	}
	t.Run("charged above the configured chain", func(t *testing.T) {
		h := &fakeHierarchy{
			parents: map[string]string{"u1": "ignored", "o1": "acme"},
			limits:  map[string][]cascade.NamedLimit{"acme": {{Name: "rpm", Bucket: perMinute(2)}}},
		}
		svc, st := newSvc(h)
		runSteps(t, svc, st, []step{
			{req: rlReq("llm", desc("org", "o1", "user", "u2")), want: "OK [OK/1/2]"},
			{req: rlReq("llm", desc("org", "o1", "user", "u3")), want: "OK [OK/0/2]"},
			{req: rlReq("llm", desc("org", "o1", "user", "u2")), want: "OVER [OVER/0/2]"},
		})
		// The walk starts at the topmost configured entity, org o1.
		h.asked = h.asked[:1]
		if fmt.Sprint(h.asked) != "[o1]" {
			t.Errorf("Ancestors asked of %v, want [o1] (the topmost configured entity)", h.asked)
		}
		if d := st.plans[0].Debits; len(d) != 2 || d[1].Depth != 2 || d[1].Key.Entity != "acme" {
			t.Errorf("plan = %+v, want the user's debit and acme's at depth 2", d)
		}
	})
	t.Run("contended lookup refuses, never ON_UNAVAILABLE", func(t *testing.T) {
		h := &fakeHierarchy{err: fmt.Errorf("read: %w", cascade.ErrContended)}
		svc, st := newSvc(h, WithOnUnavailable(false))
		runSteps(t, svc, st, []step{
			{req: rlReq("llm", desc("org", "o1", "user", "u1")), want: "OVER [OVER/0/4]"},
		})
		if st.callCount() != 0 {
			t.Errorf("store called %d times after a contended lookup", st.callCount())
		}
	})
	t.Run("unavailable lookup is decided by ON_UNAVAILABLE", func(t *testing.T) {
		for _, block := range []bool{false, true} {
			h := &fakeHierarchy{err: errors.New("dynamo: unavailable")}
			svc, st := newSvc(h, WithOnUnavailable(block))
			want := "OK [OK/0/4]"
			if block {
				want = "OVER [OVER/0/4]"
			}
			runSteps(t, svc, st, []step{{req: rlReq("llm", desc("org", "o1", "user", "u1")), want: want}})
		}
	})
	t.Run("a chain is at most MaxChain entities", func(t *testing.T) {
		h := &fakeHierarchy{parents: map[string]string{}, limits: map[string][]cascade.NamedLimit{}}
		prev := "o1"
		for i := range 20 {
			id := fmt.Sprintf("a%d", i)
			h.parents[prev] = id
			h.limits[id] = []cascade.NamedLimit{{Name: "rpm", Bucket: perMinute(100)}}
			prev = id
		}
		svc, st := newSvc(h)
		runSteps(t, svc, st, []step{{req: rlReq("llm", desc("org", "o1", "user", "u1")), want: "OK [OK/3/4]"}})
		if n := len(st.plans[0].Debits); n != descriptors.MaxChain-1 {
			t.Errorf("plan of a 22-entity stored chain has %d debits, want %d (user and 6 ancestors; org has no limit)", n, descriptors.MaxChain-1)
		}
	})
}
