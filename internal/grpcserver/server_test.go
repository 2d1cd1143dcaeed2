package grpcserver

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	_ "google.golang.org/grpc/encoding/gzip" // a client that compresses
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	rpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/dynalimit/dynalimit/internal/testutil"
)

// echo is a unary service over wrapperspb.BytesValue: it answers the
// request's bytes repeated as the "repeat" metadata... kept simple: the
// handler is a function the test sets.
type echoServer interface {
	Echo(context.Context, *wrapperspb.BytesValue) (*wrapperspb.BytesValue, error)
}

type echoFunc func(context.Context, *wrapperspb.BytesValue) (*wrapperspb.BytesValue, error)

func (f echoFunc) Echo(ctx context.Context, in *wrapperspb.BytesValue) (*wrapperspb.BytesValue, error) {
	return f(ctx, in)
}

var echoDesc = grpc.ServiceDesc{
	ServiceName: "test.Echo",
	HandlerType: (*echoServer)(nil),
	Methods: []grpc.MethodDesc{{MethodName: "Echo", Handler: func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.BytesValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		if interceptor == nil {
			return srv.(echoServer).Echo(ctx, in)
		}
		info := &grpc.UnaryServerInfo{Server: srv, FullMethod: "/test.Echo/Echo"}
		return interceptor(ctx, in, info, func(ctx context.Context, req any) (any, error) {
			return srv.(echoServer).Echo(ctx, req.(*wrapperspb.BytesValue))
		})
	}}},
}

func echo(cc *grpc.ClientConn, ctx context.Context, b []byte, opts ...grpc.CallOption) ([]byte, error) {
	out := new(wrapperspb.BytesValue)
	err := cc.Invoke(ctx, "/test.Echo/Echo", wrapperspb.Bytes(b), out, opts...)
	return out.GetValue(), err
}

type fixture struct {
	srv    *Server
	health *health.Server
	addr   string
	done   chan error
}

func start(t *testing.T, o Options, f echoFunc) *fixture {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fx := &fixture{srv: New(o), health: health.NewServer(), addr: lis.Addr().String(), done: make(chan error, 1)}
	fx.srv.RegisterService(&echoDesc, f)
	healthpb.RegisterHealthServer(fx.srv, fx.health)
	reflection.Register(fx.srv)
	go func() { fx.done <- fx.srv.Serve(lis) }()
	t.Cleanup(func() {
		fx.srv.Stop()
		if err := <-fx.done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return fx
}

func dial(t *testing.T, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	if len(opts) == 0 {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

func reverse(_ context.Context, in *wrapperspb.BytesValue) (*wrapperspb.BytesValue, error) {
	b := append([]byte(nil), in.GetValue()...)
	for i, j := 0, len(b)-1; i < j; i, j = i+1, j-1 {
		b[i], b[j] = b[j], b[i]
	}
	return wrapperspb.Bytes(b), nil
}

func both(t *testing.T, f func(t *testing.T, inline bool)) {
	for _, inline := range []bool{true, false} {
		name := "goroutine"
		if inline {
			name = "inline"
		}
		t.Run(name, func(t *testing.T) { f(t, inline) })
	}
}

func TestUnaryConcurrent(t *testing.T) {
	both(t, func(t *testing.T, inline bool) {
		fx := start(t, Options{Inline: inline}, reverse)
		cc := dial(t, fx.addr)
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for g := range 32 {
			wg.Go(func() {
				for i := range 200 {
					in := []byte(strings.Repeat("ab", g+i%7))
					out, err := echo(cc, context.Background(), in)
					if err != nil {
						errs <- err
						return
					}
					if len(out) != len(in) || (len(in) > 0 && out[0] != in[len(in)-1]) {
						errs <- errors.New("wrong answer")
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	})
}

func TestErrorsAsGRPCGoSendsThem(t *testing.T) {
	both(t, func(t *testing.T, inline bool) {
		fx := start(t, Options{Inline: inline}, func(_ context.Context, in *wrapperspb.BytesValue) (*wrapperspb.BytesValue, error) {
			switch string(in.GetValue()) {
			case "details":
				st, _ := status.New(codes.InvalidArgument, "bad 100% ünïcode\n").WithDetails(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "x"}}})
				return nil, st.Err()
			case "plain":
				return nil, errors.New("plain error")
			case "deadline":
				return nil, context.DeadlineExceeded
			}
			return in, nil
		})
		cc := dial(t, fx.addr)
		_, err := echo(cc, context.Background(), []byte("details"))
		st := status.Convert(err)
		if st.Code() != codes.InvalidArgument || st.Message() != "bad 100% ünïcode\n" || len(st.Details()) != 1 {
			t.Fatalf("details: %v %q %v", st.Code(), st.Message(), st.Details())
		}
		if _, err := echo(cc, context.Background(), []byte("plain")); status.Code(err) != codes.Unknown || status.Convert(err).Message() != "plain error" {
			t.Fatalf("plain: %v", err)
		}
		if _, err := echo(cc, context.Background(), []byte("deadline")); status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("deadline: %v", err)
		}
		err = cc.Invoke(context.Background(), "/test.Echo/Nope", wrapperspb.Bytes(nil), new(wrapperspb.BytesValue))
		if status.Code(err) != codes.Unimplemented || !strings.Contains(err.Error(), "unknown method Nope for service test.Echo") {
			t.Fatalf("unknown method: %v", err)
		}
		err = cc.Invoke(context.Background(), "/test.Nope/Echo", wrapperspb.Bytes(nil), new(wrapperspb.BytesValue))
		if status.Code(err) != codes.Unimplemented || !strings.Contains(err.Error(), "unknown service test.Nope") {
			t.Fatalf("unknown service: %v", err)
		}
		if _, err := echo(cc, context.Background(), []byte("x"), grpc.UseCompressor("gzip")); status.Code(err) != codes.Unimplemented {
			t.Fatalf("compressed: %v", err)
		}
		// The connection still works after every error.
		if out, err := echo(cc, context.Background(), []byte("ok")); err != nil || string(out) != "ok" {
			t.Fatalf("after errors: %q %v", out, err)
		}
	})
}

func TestInterceptorSeesMetadataAndDeadline(t *testing.T) {
	both(t, func(t *testing.T, inline bool) {
		var got metadata.MD
		var deadline bool
		icpt := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			got, _ = metadata.FromIncomingContext(ctx)
			_, deadline = ctx.Deadline()
			if info.FullMethod != "/test.Echo/Echo" {
				return nil, status.Error(codes.Internal, info.FullMethod)
			}
			return h(ctx, req)
		}
		fx := start(t, Options{Inline: inline, UnaryInterceptor: icpt, UnaryMetadata: true}, reverse)
		cc := dial(t, fx.addr)
		ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", "00-abc-def-01", "x-id-bin", "\x00\x01")
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if _, err := echo(cc, ctx, []byte("hi")); err != nil {
			t.Fatal(err)
		}
		if got.Get("traceparent")[0] != "00-abc-def-01" || got.Get("x-id-bin")[0] != "\x00\x01" || !deadline {
			t.Fatalf("metadata %v deadline %v", got, deadline)
		}
	})
}

func TestDeadlineReachesAWaitingHandler(t *testing.T) {
	fx := start(t, Options{}, func(ctx context.Context, in *wrapperspb.BytesValue) (*wrapperspb.BytesValue, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	cc := dial(t, fx.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := echo(cc, ctx, []byte("x")); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("got %v", err)
	}
}

func TestLargeMessagesAndFlowControl(t *testing.T) {
	both(t, func(t *testing.T, inline bool) {
		fx := start(t, Options{Inline: inline, MaxRecvMsgSize: 3 << 20}, reverse)
		cc := dial(t, fx.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(8<<20), grpc.MaxCallSendMsgSize(8<<20)))
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Go(func() {
				in := make([]byte, (2<<20)+g)
				for i := range in {
					in[i] = byte(i)
				}
				out, err := echo(cc, context.Background(), in)
				if err != nil || len(out) != len(in) || out[0] != in[len(in)-1] {
					t.Errorf("2 MiB: %d bytes, %v", len(out), err)
				}
			})
		}
		wg.Wait()
		_, err := echo(cc, context.Background(), make([]byte, 4<<20))
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("4 MiB: %v", err)
		}
		if _, err := echo(cc, context.Background(), []byte("small")); err != nil {
			t.Fatal(err)
		}
	})
}

func TestHealthWatchAndReflection(t *testing.T) {
	fx := start(t, Options{Inline: true}, reverse)
	cc := dial(t, fx.addr)
	hc := healthpb.NewHealthClient(cc)
	if r, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("check: %v %v", r, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{Service: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := w.Recv(); err != nil || r.Status != healthpb.HealthCheckResponse_SERVICE_UNKNOWN {
		t.Fatalf("watch: %v %v", r, err)
	}
	fx.health.SetServingStatus("x", healthpb.HealthCheckResponse_SERVING)
	if r, err := w.Recv(); err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("watch 2: %v %v", r, err)
	}
	cancel()

	rc, err := rpb.NewServerReflectionClient(cc).ServerReflectionInfo(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Send(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	r, err := rc.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range r.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	if got := strings.Join(names, ","); !strings.Contains(got, "test.Echo") || !strings.Contains(got, "grpc.health.v1.Health") {
		t.Fatalf("services %s", got)
	}
	if err := rc.Send(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: "grpc.health.v1.Health"}}); err != nil {
		t.Fatal(err)
	}
	if r, err := rc.Recv(); err != nil || len(r.GetFileDescriptorResponse().GetFileDescriptorProto()) == 0 {
		t.Fatalf("file: %v %v", r, err)
	}
	if err := rc.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := rc.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("end: %v", err)
	}
}

func TestGracefulStopFinishesCallsInFlight(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	fx := start(t, Options{}, func(_ context.Context, in *wrapperspb.BytesValue) (*wrapperspb.BytesValue, error) {
		started <- struct{}{}
		<-release
		return in, nil
	})
	cc := dial(t, fx.addr)
	res := make(chan error, 1)
	go func() {
		_, err := echo(cc, context.Background(), []byte("x"))
		res <- err
	}()
	<-started
	stopped := make(chan struct{})
	go func() { fx.srv.GracefulStop(); close(stopped) }()
	time.Sleep(100 * time.Millisecond)
	select {
	case <-stopped:
		t.Fatal("GracefulStop returned with a call in flight")
	default:
	}
	close(release)
	if err := <-res; err != nil {
		t.Fatalf("call in flight: %v", err)
	}
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("GracefulStop did not return")
	}
}

func TestMaxConnectionAgeMovesClientsWithoutErrors(t *testing.T) {
	both(t, func(t *testing.T, inline bool) {
		fx := start(t, Options{Inline: inline, Keepalive: keepalive.ServerParameters{MaxConnectionAge: 100 * time.Millisecond, MaxConnectionAgeGrace: time.Second}}, reverse)
		cc := dial(t, fx.addr)
		deadline := time.Now().Add(700 * time.Millisecond)
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for time.Now().Before(deadline) {
					if _, err := echo(cc, context.Background(), []byte("abc")); err != nil {
						t.Errorf("call: %v", err)
						return
					}
				}
			})
		}
		wg.Wait()
	})
}

func TestTLS(t *testing.T) {
	pki := testutil.NewPKI(t)
	fx := start(t, Options{Inline: true, TLS: &tls.Config{Certificates: []tls.Certificate{pki.Server}}}, reverse)
	cc := dial(t, fx.addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pki.CA, ServerName: "127.0.0.1"})))
	if out, err := echo(cc, context.Background(), []byte("ab")); err != nil || string(out) != "ba" {
		t.Fatalf("%q %v", out, err)
	}
}

// TestStopClosesAHandshakeInProgress: a client that connects and never
// speaks TLS does not hold Stop for the handshake's two minutes.
func TestStopClosesAHandshakeInProgress(t *testing.T) {
	pki := testutil.NewPKI(t)
	fx := start(t, Options{TLS: &tls.Config{Certificates: []tls.Certificate{pki.Server}}}, reverse)
	nc, err := net.Dial("tcp", fx.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	time.Sleep(50 * time.Millisecond) // accepted, waiting for a ClientHello
	stopped := make(chan struct{})
	go func() { fx.srv.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("Stop waited for a TLS handshake")
	}
}
