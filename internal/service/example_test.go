package service_test

import (
	"context"
	"fmt"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/dynalimit/dynalimit/internal/memstore"
	"github.com/dynalimit/dynalimit/internal/service"
	"github.com/dynalimit/dynalimit/pkg/descriptors"
)

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
	// The embedded store, on a clock that stands still.
	store := memstore.New(memstore.WithClock(func() time.Time { return time.UnixMilli(1_700_000_000_000) }))
	svc := service.New(store,
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
