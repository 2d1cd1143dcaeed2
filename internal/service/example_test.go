package service_test

import (
	"context"
	"fmt"
	"sync"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/dynalimit/dynalimit/internal/service"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/descriptors"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// mapStore is a minimal store: cascade.Decide over a map at a fixed instant.
type mapStore struct {
	mu     sync.Mutex
	states map[string]tokenbucket.State
}

func (m *mapStore) Acquire(_ context.Context, p *cascade.Plan) (cascade.Decision, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	const now = 1_700_000_000_000
	slot := make([]int, len(p.Debits))
	keys := make([]string, len(p.Debits))
	levels := make([]tokenbucket.Level, len(p.Debits))
	for i, d := range p.Debits {
		keys[i] = d.Key.Namespace + "/" + d.Key.Entity + "#" + d.Key.Resource + "#" + d.Limit
		levels[i] = tokenbucket.New(d.Bucket.Full(now))
		if st, ok := m.states[keys[i]]; ok {
			levels[i] = tokenbucket.Stored(st)
		}
		slot[i] = i
	}
	dec := cascade.Decide(p, slot, levels, now)
	for i, k := range keys {
		m.states[k] = levels[i].State()
	}
	return dec, nil
}

func Example() {
	cfg, err := descriptors.Parse([]descriptors.File{{Name: "api.yaml", Data: []byte(`
domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2}
`)}}, descriptors.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	svc := service.New(&mapStore{states: map[string]tokenbucket.State{}},
		func() *descriptors.Config { return cfg },
		service.WithResponseHeaders(true, "", "", ""))
	req := &pb.RateLimitRequest{
		Domain: "api",
		Descriptors: []*rlv3.RateLimitDescriptor{{
			Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "user", Value: "alice"}},
		}},
	}
	for range 3 {
		resp, err := svc.ShouldRateLimit(context.Background(), req)
		if err != nil {
			fmt.Println(err)
			return
		}
		h := resp.GetResponseHeadersToAdd()
		fmt.Println(resp.GetOverallCode(), resp.GetStatuses()[0].GetLimitRemaining(), h[2].GetKey()+":", h[2].GetValue())
	}
	// Output:
	// OK 1 RateLimit-Reset: 30
	// OK 0 RateLimit-Reset: 60
	// OVER_LIMIT 0 RateLimit-Reset: 30
}
