package main

import (
	"context"
	"crypto/tls"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/dynalimit/dynalimit/internal/testutil"
)

// TestBinaryServesMutualTLS: with GRPC_SERVER_USE_TLS and a client CA, a
// client with a certificate is answered and one without is refused.
func TestBinaryServesMutualTLS(t *testing.T) {
	pki := testutil.NewPKI(t)
	dir := t.TempDir()
	writeConfig(t, dir, "e2e.yaml", e2eConfig)
	p := startBinary(t, dir,
		"GRPC_SERVER_USE_TLS=true",
		"GRPC_SERVER_TLS_CERT="+pki.ServerCert,
		"GRPC_SERVER_TLS_KEY="+pki.ServerKey,
		"GRPC_CLIENT_TLS_CACERT="+pki.CAFile,
	)
	call := func(cfg *tls.Config) error {
		cc, err := grpc.NewClient(p.GRPCAddr(), grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		if err != nil {
			return err
		}
		defer cc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = pb.NewRateLimitServiceClient(cc).ShouldRateLimit(ctx, &pb.RateLimitRequest{
			Domain: "e2e", Descriptors: []*rlv3.RateLimitDescriptor{descriptor("generic_key", "plenty")},
		})
		return err
	}
	if err := call(&tls.Config{RootCAs: pki.CA, Certificates: []tls.Certificate{pki.Client}, MinVersion: tls.VersionTLS12}); err != nil {
		t.Errorf("call with a client certificate = %v, want answered", err)
	}
	if err := call(&tls.Config{RootCAs: pki.CA, MinVersion: tls.VersionTLS12}); err == nil {
		t.Error("call without a client certificate was answered, want refused (mTLS)")
	}
}
