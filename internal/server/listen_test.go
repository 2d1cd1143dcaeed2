package server

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestGRPCOnUnixSocket: with GRPCUDS, gRPC answers on the socket (as
// envoyproxy/ratelimit's GRPC_UDS does), a stale socket file is replaced,
// and the file is gone after the server stops.
func TestGRPCOnUnixSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "rl.sock")
	stale, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	_ = stale.Close() // leaves the file behind, as a killed process does

	s, cancel, done := start(t, Options{RateLimit: &okRLS{}, GRPCUDS: sock})
	if addr, _, _ := s.Addrs(); addr.Network() != "unix" || addr.String() != sock {
		t.Errorf("Addrs() grpc = %s %s, want unix %s", addr.Network(), addr, sock)
	}
	cc, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancelCall := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelCall()
	resp, err := pb.NewRateLimitServiceClient(cc).ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "d"})
	if err != nil || resp.GetOverallCode() != pb.RateLimitResponse_OK {
		t.Fatalf("ShouldRateLimit over %s = %v, %v; want OK", sock, resp, err)
	}
	if _, err := New(Options{RateLimit: &okRLS{}, GRPCUDS: sock, HTTPAddr: "127.0.0.1:0", DebugAddr: "127.0.0.1:0", Logger: quietLogger()}); err == nil ||
		err.Error() != "server: gRPC unix socket "+sock+": address already in use (is another ratelimit running? set GRPC_UDS or -grpc_uds to move it)" {
		t.Errorf("New() on a served socket = %v, want a refusal naming GRPC_UDS", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Errorf("socket file after stop: %v, want it removed", err)
	}
}

func TestGRPCUDSRefusesNonSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := New(Options{RateLimit: &okRLS{}, GRPCUDS: path, HTTPAddr: "127.0.0.1:0", DebugAddr: "127.0.0.1:0", Logger: quietLogger()})
	if err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("New(GRPCUDS=regular file) = %v, want a refusal", err)
	}
}
