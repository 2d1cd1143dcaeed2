package service

import (
	"context"
	"strconv"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/descriptors"
)

// admitStore admits every plan as a store would after a successful decision,
// so that benchmarks measure the service alone.
type admitStore struct{}

func (admitStore) Acquire(_ context.Context, p *cascade.Plan) (cascade.Decision, error) {
	dec := cascade.Decision{Admitted: true, Statuses: make([]cascade.Status, len(p.Debits))}
	for i := range dec.Statuses {
		dec.Statuses[i] = cascade.Status{OK: true, Remaining: p.Debits[i].Bucket.Capacity - p.Debits[i].Amount}
	}
	return dec, nil
}

func BenchmarkShouldRateLimit(b *testing.B) {
	cfg := mustConfig(b, testConfig)
	distinct := make([]*pb.RateLimitRequest, 1024)
	for i := range distinct {
		distinct[i] = rlReq("api", desc("user", "u"+strconv.Itoa(i)), desc("ip", "10.0.0."+strconv.Itoa(i)))
	}
	cases := []struct {
		name string
		reqs []*pb.RateLimitRequest
		opts []Option
	}{
		{"one_descriptor", []*pb.RateLimitRequest{rlReq("api", desc("user", "alice"))}, nil},
		{"two_descriptors", []*pb.RateLimitRequest{rlReq("api", desc("user", "alice"), desc("ip", "10.0.0.1"))}, nil},
		{"distinct_keys", distinct, nil},
		{"headers_and_metadata", []*pb.RateLimitRequest{rlReq("api", desc("user", "alice"), desc("ip", "10.0.0.1"))},
			[]Option{WithResponseHeaders(true, "", "", ""), WithDynamicMetadata(true)}},
		{"unmatched", []*pb.RateLimitRequest{rlReq("api", &rlv3.RateLimitDescriptor{Entries: desc("nothing", "x").Entries})}, nil},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			svc := New(admitStore{}, func() *descriptors.Config { return cfg }, c.opts...)
			ctx := context.Background()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, err := svc.ShouldRateLimit(ctx, c.reqs[i%len(c.reqs)]); err != nil {
					b.Fatalf("ShouldRateLimit() error = %v", err)
				}
				i++
			}
		})
	}
}
