package service

import (
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
)

// BenchmarkDecodeRequest is what decoding a one-descriptor request costs
// with the protobuf runtime (the service pools the top-level message).
func BenchmarkDecodeRequest(b *testing.B) {
	raw, err := proto.Marshal(rlReq("api", desc("user", "alice")))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		var r pb.RateLimitRequest
		if err := proto.Unmarshal(raw, &r); err != nil {
			b.Fatal(err)
		}
	}
}

// oneStatusResponse is the answer to a one-descriptor request.
func oneStatusResponse() *pb.RateLimitResponse {
	return &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK, Statuses: []*pb.RateLimitResponse_DescriptorStatus{{
		Code:           pb.RateLimitResponse_OK,
		CurrentLimit:   &pb.RateLimitResponse_RateLimit{RequestsPerUnit: 10, Unit: pb.RateLimitResponse_RateLimit_MINUTE},
		LimitRemaining: 9,
	}}}
}

// BenchmarkEncodeResponse is the service codec's encoding of an answer
// (protobuf's MarshalAppend into a reused buffer); BenchmarkEncodeResponseVT
// (codec_vt_bench_test.go, build tag vtprotobuf) is go-control-plane's
// generated vtprotobuf encoder for the same message.
func BenchmarkEncodeResponse(b *testing.B) {
	m := oneStatusResponse()
	buf := make([]byte, 0, 512)
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if buf, err = (codec{}).MarshalAppend(buf[:0], m); err != nil {
			b.Fatal(err)
		}
	}
}
