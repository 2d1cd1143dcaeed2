package xdstest

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cache "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	server "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
)

// Server is an in-process ADS management server serving a snapshot cache.
type Server struct {
	addr string
	gs   *grpc.Server
	wg   sync.WaitGroup

	mu     sync.Mutex
	nacks  []string
	header metadata.MD
}

// Start serves snap on addr ("127.0.0.1:0" for a free port; a restarted
// server may take its old address back, retried for a second) with creds
// (nil for plaintext). The server is stopped when the test ends.
func Start(t testing.TB, snap cache.SnapshotCache, addr string, creds credentials.TransportCredentials) *Server {
	t.Helper()
	s := &Server{header: metadata.MD{}}
	cb := server.CallbackFuncs{
		StreamRequestFunc: func(_ int64, req *discovery.DiscoveryRequest) error {
			if d := req.GetErrorDetail(); d != nil {
				s.mu.Lock()
				s.nacks = append(s.nacks, d.GetMessage())
				s.mu.Unlock()
			}
			return nil
		},
		StreamOpenFunc: func(ctx context.Context, _ int64, _ string) error {
			md, _ := metadata.FromIncomingContext(ctx)
			s.mu.Lock()
			for k, v := range md {
				s.header.Append(k, v...)
			}
			s.mu.Unlock()
			return nil
		},
	}
	var opts []grpc.ServerOption
	if creds != nil {
		opts = append(opts, grpc.Creds(creds))
	}
	s.gs = grpc.NewServer(opts...)
	discovery.RegisterAggregatedDiscoveryServiceServer(s.gs, server.NewServer(context.Background(), snap, cb))
	var lis net.Listener
	var err error
	for range 50 {
		if lis, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("xdstest: listen %s: %v", addr, err)
	}
	s.addr = lis.Addr().String()
	s.wg.Add(1)
	go func() { defer s.wg.Done(); _ = s.gs.Serve(lis) }()
	t.Cleanup(s.Stop)
	return s
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.addr }

// Stop closes the server and its streams and waits for it.
func (s *Server) Stop() { s.gs.Stop(); s.wg.Wait() }

// NACKs returns the error details of the NACKs received so far.
func (s *Server) NACKs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.nacks...)
}

// Header returns the values of the metadata key sent on the streams opened
// so far, in order.
func (s *Server) Header(key string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.header.Get(key)...)
}

// Push sets, for node, a snapshot of version holding confs as the whole
// rate-limit configuration.
func Push(t testing.TB, c cache.SnapshotCache, node, version string, confs ...*rlsconf.RateLimitConfig) {
	t.Helper()
	res := make([]types.Resource, len(confs))
	for i, c := range confs {
		res[i] = c
	}
	snap, err := cache.NewSnapshot(version, map[resource.Type][]types.Resource{resource.RateLimitConfigType: res})
	if err != nil {
		t.Fatalf("xdstest: NewSnapshot(%s) = %v", version, err)
	}
	if err := c.SetSnapshot(context.Background(), node, snap); err != nil {
		t.Fatalf("xdstest: SetSnapshot(%s, %s) = %v", node, version, err)
	}
}
