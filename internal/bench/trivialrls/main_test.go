package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
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

func TestProtosetDescribesTheService(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rls.protoset")
	if err := run([]string{"-protoset", path}); err != nil {
		t.Fatalf("run(-protoset) = %v", err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	set := &descriptorpb.FileDescriptorSet{}
	if err := proto.Unmarshal(b, set); err != nil {
		t.Fatalf("the protoset does not parse: %v", err)
	}
	// The set must stand alone: every import before the file that needs it.
	files, err := protodesc.NewFiles(set)
	if err != nil {
		t.Fatalf("the protoset is not self-contained: %v", err)
	}
	d, err := files.FindDescriptorByName("envoy.service.ratelimit.v3.RateLimitService.ShouldRateLimit")
	if err != nil {
		t.Fatalf("ShouldRateLimit is not in the protoset: %v", err)
	}
	if got := string(d.(protoreflect.MethodDescriptor).Input().FullName()); got != "envoy.service.ratelimit.v3.RateLimitRequest" {
		t.Errorf("ShouldRateLimit takes %s, want envoy.service.ratelimit.v3.RateLimitRequest", got)
	}
}
