package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
)

// stopTimeout bounds the graceful stop before the server is stopped hard.
const stopTimeout = 2 * time.Second

// okResponse is the one answer; it is never mutated, so sharing it across
// concurrent calls is safe.
var okResponse = &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK}

// rls answers every ShouldRateLimit with OVERALL_CODE OK.
type rls struct {
	pb.UnimplementedRateLimitServiceServer
}

var _ pb.RateLimitServiceServer = rls{}

// ShouldRateLimit returns OK without reading the request.
func (rls) ShouldRateLimit(context.Context, *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	return okResponse, nil
}

// writeProtoset writes the FileDescriptorSet of the RateLimitService's file
// and every file it imports, dependencies first, to path: what ghz's
// --protoset reads to call a server that does not register reflection.
func writeProtoset(path string) error {
	set := &descriptorpb.FileDescriptorSet{}
	seen := map[string]bool{}
	var add func(protoreflect.FileDescriptor)
	add = func(fd protoreflect.FileDescriptor) {
		if seen[fd.Path()] {
			return
		}
		seen[fd.Path()] = true
		imports := fd.Imports()
		for i := range imports.Len() {
			add(imports.Get(i).FileDescriptor)
		}
		set.File = append(set.File, protodesc.ToFileDescriptorProto(fd))
	}
	add(pb.File_envoy_service_ratelimit_v3_rls_proto)
	b, err := proto.Marshal(set)
	if err != nil {
		return fmt.Errorf("trivialrls: protoset: %w", err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("trivialrls: protoset: %w", err)
	}
	return nil
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// run parses args, serves until SIGINT or SIGTERM, and stops the server.
func run(args []string) error {
	fs := flag.NewFlagSet("trivialrls", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8081", "gRPC listen address (host:port; port 0 picks a free one)")
	protoset := fs.String("protoset", "", "write the RateLimitService's descriptors (a FileDescriptorSet) to this file and exit")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("trivialrls: %w", err)
	}
	if *protoset != "" {
		return writeProtoset(*protoset)
	}

	lis, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("trivialrls: listen %s: %w", *addr, err)
	}
	srv := grpc.NewServer()
	pb.RegisterRateLimitServiceServer(srv, rls{})
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	reflection.Register(srv)
	fmt.Printf("listening on %s\n", lis.Addr())

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()

	select {
	case err := <-served:
		if err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			return fmt.Errorf("trivialrls: serve: %w", err)
		}
		return nil
	case <-ctx.Done():
	}
	hs.Shutdown()
	timer := time.AfterFunc(stopTimeout, srv.Stop)
	defer timer.Stop()
	srv.GracefulStop()
	return <-served
}
