package service

import (
	"context"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/dynalimit/dynalimit/pkg/descriptors"
)

// FuzzShouldRateLimit feeds random wire-format requests to the gRPC
// handler, as they arrive: it must never panic, must fail only with
// InvalidArgument (malformed bytes and invalid UTF-8 included), and must answer one
// status per descriptor with an OK or OVER_LIMIT overall code.
func FuzzShouldRateLimit(f *testing.F) {
	seeds := []*pb.RateLimitRequest{
		rlReq("api", desc("user", "a")),
		rlReq("api", desc("user", "a"), desc("ip", "b"), desc("free", "c"), desc("blocked", "d")),
		{Domain: "api", HitsAddend: 7, Descriptors: []*rlv3.RateLimitDescriptor{withHits(desc("model", "m"), 0), negative(desc("tokens", "t"), 9)}},
		rlReq("api", &rlv3.RateLimitDescriptor{Entries: desc("user", "o").Entries, Limit: &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: typev3.RateLimitUnit_MINUTE, UnitMultiplier: wrapperspb.UInt32(3)}}),
		rlReq("api", desc("quota_a", "q"), desc("quota_b", "q"), desc("shadow", "s"), desc("generic", "g"), desc("specific", "s")),
		rlReq("", desc("user", "a")),
	}
	for _, s := range seeds {
		b, err := proto.Marshal(s)
		if err != nil {
			f.Fatalf("proto.Marshal(seed) error = %v", err)
		}
		f.Add(b, false, false)
	}
	cfg := mustConfig(f, testConfig)
	f.Fuzz(func(t *testing.T, data []byte, shadow, storeDown bool) {
		st := newFakeStore()
		if storeDown {
			st.setErr(errDown)
		}
		svc := New(st, func() *descriptors.Config { return cfg }, WithShadowMode(shadow),
			WithResponseHeaders(true, "", "", ""), WithDynamicMetadata(true))
		resp, err := svc.shouldRateLimitWire(context.Background(), data)
		if err != nil {
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("ShouldRateLimit() error = %v, want nil or InvalidArgument", err)
			}
			return
		}
		var req pb.RateLimitRequest
		if err := proto.Unmarshal(data, &req); err != nil {
			t.Fatalf("ShouldRateLimit() answered bytes that do not decode: %v", err)
		}
		if len(resp.GetStatuses()) != len(req.GetDescriptors()) {
			t.Fatalf("ShouldRateLimit() statuses = %d, want %d", len(resp.GetStatuses()), len(req.GetDescriptors()))
		}
		if c := resp.GetOverallCode(); c != pb.RateLimitResponse_OK && c != pb.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("ShouldRateLimit() overall code = %v, want OK or OVER_LIMIT", c)
		}
		if shadow && resp.GetOverallCode() != pb.RateLimitResponse_OK {
			t.Fatalf("ShouldRateLimit() in global shadow mode = %v, want OK", resp.GetOverallCode())
		}
		if st.callCount() > 1 {
			t.Fatalf("store calls = %d, want at most 1", st.callCount())
		}
		if _, err := proto.Marshal(resp); err != nil {
			t.Fatalf("proto.Marshal(response) error = %v", err)
		}
	})
}
