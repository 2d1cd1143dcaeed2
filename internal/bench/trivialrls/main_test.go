package main

import (
	"context"
	"net"
	"strings"
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestShouldRateLimitAnswersOK(t *testing.T) {
	lis := bufconn.Listen(1 << 16)
	srv := grpc.NewServer()
	pb.RegisterRateLimitServiceServer(srv, rls{})
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	cc, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("grpc.NewClient() error = %v", err)
	}
	defer cc.Close()
	client := pb.NewRateLimitServiceClient(cc)

	tests := []struct {
		name string
		req  *pb.RateLimitRequest
	}{
		{"empty request", &pb.RateLimitRequest{}},
		{"one descriptor", &pb.RateLimitRequest{Domain: "bench", HitsAddend: 1}},
		{"huge hits addend", &pb.RateLimitRequest{Domain: "bench", HitsAddend: 1 << 31}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := client.ShouldRateLimit(context.Background(), tc.req)
			if err != nil {
				t.Fatalf("ShouldRateLimit(%v) error = %v, want nil", tc.req, err)
			}
			if got := resp.GetOverallCode(); got != pb.RateLimitResponse_OK {
				t.Errorf("ShouldRateLimit(%v).OverallCode = %v, want OK", tc.req, got)
			}
		})
	}
}

func TestRunRejectsBadArguments(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown flag", []string{"-no_such_flag"}, "trivialrls: flag provided but not defined"},
		{"unparseable address", []string{"-addr", "127.0.0.1:notaport"}, "trivialrls: listen 127.0.0.1:notaport"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := run(tc.args)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("run(%q) = %v, want an error containing %q", tc.args, err, tc.want)
			}
		})
	}
}
