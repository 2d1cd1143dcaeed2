package service

import (
	"context"
	"net"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/dynalimit/dynalimit/pkg/descriptors"
)

// serveBufconn serves srv's RLS on an in-memory listener (a *Service as
// the server package registers it) and returns a client; everything stops at the end of the test or benchmark.
func serveBufconn(tb testing.TB, srv pb.RateLimitServiceServer) pb.RateLimitServiceClient {
	tb.Helper()
	return pb.NewRateLimitServiceClient(dialBufconn(tb, srv))
}

// dialBufconn is serveBufconn's connection.
func dialBufconn(tb testing.TB, srv pb.RateLimitServiceServer) *grpc.ClientConn {
	tb.Helper()
	lis := bufconn.Listen(1 << 20)
	var gs *grpc.Server
	if svc, ok := srv.(*Service); ok {
		gs = grpc.NewServer(svc.GRPCServerOptions()...)
		svc.RegisterGRPC(gs)
	} else {
		gs = grpc.NewServer()
		pb.RegisterRateLimitServiceServer(gs, srv)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = gs.Serve(lis)
	}()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tb.Fatalf("grpc.NewClient() error = %v", err)
	}
	tb.Cleanup(func() {
		_ = conn.Close()
		gs.Stop()
		<-done
	})
	return conn
}

func TestGRPCEndToEnd(t *testing.T) {
	cfg := mustConfig(t, testConfig)
	client := serveBufconn(t, New(newFakeStore(), func() *descriptors.Config { return cfg },
		WithResponseHeaders(true, "", "", ""), WithDynamicMetadata(true)))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	wants := []string{"OK [OK/2/3]", "OK [OK/1/3]", "OK [OK/0/3]", "OVER [OVER/0/3]"}
	for i, want := range wants {
		resp, err := client.ShouldRateLimit(ctx, rlReq("api", desc("user", "grpc")))
		if err != nil {
			t.Fatalf("call %d: ShouldRateLimit() error = %v", i, err)
		}
		if got := respString(resp); got != want {
			t.Errorf("call %d: ShouldRateLimit() = %s, want %s", i, got, want)
		}
		if len(resp.GetResponseHeadersToAdd()) != 3 {
			t.Errorf("call %d: headers = %v, want 3", i, resp.GetResponseHeadersToAdd())
		}
		if resp.GetDynamicMetadata().GetFields()["domain"].GetStringValue() != "api" {
			t.Errorf("call %d: dynamic_metadata = %v, want domain api", i, resp.GetDynamicMetadata())
		}
	}
	_, err := client.ShouldRateLimit(ctx, rlReq("", desc("user", "grpc")))
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("ShouldRateLimit(empty domain) error = %v, want InvalidArgument", err)
	}
}

// trivialServer answers OK without looking at the request: the baseline the
// service's throughput is compared with.
type trivialServer struct{}

func (trivialServer) ShouldRateLimit(context.Context, *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	return &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK}, nil
}

// BenchmarkGRPC compares the service behind a real gRPC server (bufconn)
// with a trivial server, to measure the service's share of a call.
func BenchmarkGRPC(b *testing.B) {
	cfg := mustConfig(b, testConfig)
	servers := []struct {
		name string
		srv  pb.RateLimitServiceServer
	}{
		{"trivial", trivialServer{}},
		{"service", New(admitStore{}, func() *descriptors.Config { return cfg })},
	}
	req := rlReq("api", desc("ip", "10.0.0.1"), desc("free", "x"))
	for _, s := range servers {
		b.Run(s.name, func(b *testing.B) {
			client := serveBufconn(b, s.srv)
			ctx := context.Background()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := client.ShouldRateLimit(ctx, req); err != nil {
						b.Errorf("ShouldRateLimit() error = %v", err)
						return
					}
				}
			})
		})
	}
}
