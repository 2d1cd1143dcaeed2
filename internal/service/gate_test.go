package service

import (
	"context"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/dynalimit/dynalimit/pkg/descriptors"
)

// deletedSet is a NamespaceGate over a fixed set ("" the deployment's).
type deletedSet map[string]bool

func (d deletedSet) Deleted(ns string) bool { return d[ns] }

// TestNamespaceGate: a descriptor whose rule's namespace the gate holds
// deleted is answered as unmatched (OK, no limit, no debit), and so is a
// limit override while the deployment's namespace is deleted; the other
// namespaces' rules are decided as before, in the same request.
func TestNamespaceGate(t *testing.T) {
	files := []descriptors.File{
		{Name: "own.yaml", Data: []byte("namespace: team-x\ndomain: own\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 1}\n")},
		{Name: "plain.yaml", Data: []byte("domain: own\ndescriptors:\n  - key: other\n    rate_limit: {unit: minute, requests_per_unit: 1}\n")},
	}
	cfg, err := descriptors.Parse(files, descriptors.Options{MergeDomains: true})
	if err != nil {
		t.Fatalf("descriptors.Parse() = %v", err)
	}
	override := &rlv3.RateLimitDescriptor{Entries: desc("free", "f").Entries, Limit: &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_MINUTE}}
	cases := []struct {
		name    string
		deleted deletedSet
		debits  int    // debits of the one plan (0: no plan)
		second  string // the overall code of the same request again
	}{
		{"none deleted", deletedSet{}, 3, "OVER_LIMIT"},
		{"team-x deleted", deletedSet{"team-x": true}, 2, "OVER_LIMIT"},
		{"the deployment's deleted", deletedSet{"": true}, 1, "OVER_LIMIT"},
		{"both deleted", deletedSet{"": true, "team-x": true}, 0, "OK"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := newFakeStore()
			svc := New(st, func() *descriptors.Config { return cfg }, WithNamespaceGate(c.deleted))
			req := rlReq("own", desc("user", "u"), desc("other", "o"), override)
			resp, err := svc.ShouldRateLimit(context.Background(), req)
			if err != nil || resp.GetOverallCode() != pb.RateLimitResponse_OK {
				t.Fatalf("ShouldRateLimit() = %v, %v, want OK", resp, err)
			}
			debits := 0
			for _, p := range st.plans {
				debits += len(p.Debits)
			}
			if debits != c.debits {
				t.Errorf("debits = %d (%+v), want %d", debits, st.plans, c.debits)
			}
			for i, s := range resp.GetStatuses() {
				gone := (i == 0 && c.deleted["team-x"]) || (i > 0 && c.deleted[""])
				if gone && s.GetCurrentLimit() != nil {
					t.Errorf("status %d = %v, want no current limit: its namespace is deleted", i, s)
				}
			}
			again, err := svc.ShouldRateLimit(context.Background(), req)
			if err != nil || again.GetOverallCode().String() != c.second {
				t.Errorf("ShouldRateLimit() again = %v, %v, want %s", again.GetOverallCode(), err, c.second)
			}
		})
	}
}
