package main

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestBinaryServesUnixSocket: with GRPC_UDS the binary answers
// ShouldRateLimit over the socket, and not on GRPC_HOST:GRPC_PORT.
func TestBinaryServesUnixSocket(t *testing.T) {
	dir := t.TempDir()
	writeConfig(t, dir, "e2e.yaml", e2eConfig)
	sock := filepath.Join(t.TempDir(), "rl.sock")
	p := startBinary(t, dir, "GRPC_UDS="+sock)

	cc, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rls := pb.NewRateLimitServiceClient(cc)
	want := []pb.RateLimitResponse_Code{pb.RateLimitResponse_OK, pb.RateLimitResponse_OK, pb.RateLimitResponse_OK, pb.RateLimitResponse_OVER_LIMIT}
	for i, w := range want {
		resp, err := rls.ShouldRateLimit(ctx, &pb.RateLimitRequest{
			Domain:      "e2e",
			Descriptors: []*rlv3.RateLimitDescriptor{descriptor("generic_key", "three")},
		})
		if err != nil || resp.GetOverallCode() != w {
			t.Fatalf("call %d over %s = %v, %v, want %v", i, sock, resp.GetOverallCode(), err, w)
		}
	}
	if c, err := net.DialTimeout("tcp", p.GRPCAddr(), time.Second); err == nil {
		c.Close()
		t.Errorf("gRPC also listens on %s, want the socket only", p.GRPCAddr())
	}
}
