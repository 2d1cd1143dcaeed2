package conformance

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/grpclog"
	"google.golang.org/grpc/interop"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/dynalimit/dynalimit/internal/grpcserver"
	"github.com/dynalimit/dynalimit/internal/testutil"
)

// interopServer is a server the interop cases run against.
type interopServer struct {
	name string
	// native marks internal/grpcserver, whose unsupported cases differ.
	native bool
	start  func(lis net.Listener) (stop func())
}

var interopServers = []interopServer{
	{name: "grpc-go", start: func(lis net.Listener) func() {
		s := grpc.NewServer()
		testgrpc.RegisterTestServiceServer(s, interop.NewTestServer())
		go func() { _ = s.Serve(lis) }()
		return s.Stop
	}},
	{name: "native", native: true, start: startNative(false)},
	{name: "native-inline", native: true, start: startNative(true)},
}

// startNative serves the interop test service on internal/grpcserver, with
// unary calls answered on the connection's reader when inline (the embedded
// store's setting) or on goroutines of their own (DynamoDB's).
func startNative(inline bool) func(lis net.Listener) func() {
	return func(lis net.Listener) func() {
		log := logrus.New()
		log.SetLevel(logrus.WarnLevel)
		s := grpcserver.New(grpcserver.Options{
			Inline:        inline,
			UnaryMetadata: true, // the test service echoes request metadata
			Logger:        logrus.NewEntry(log),
		})
		testgrpc.RegisterTestServiceServer(s, interop.NewTestServer())
		done := make(chan struct{})
		go func() { defer close(done); _ = s.Serve(lis) }()
		return func() { s.Stop(); <-done }
	}
}

// interopCase is one case of grpc-go's interop client (the names are those
// of interop/client's -test_case flag, plus the gzip variants).
type interopCase struct {
	name string
	run  func(ctx context.Context, cc *grpc.ClientConn, addr string)
}

// withTestService adapts a Do* function that takes a TestServiceClient.
func withTestService(do func(context.Context, testgrpc.TestServiceClient, ...grpc.CallOption), opts ...grpc.CallOption) func(context.Context, *grpc.ClientConn, string) {
	return func(ctx context.Context, cc *grpc.ClientConn, _ string) {
		do(ctx, testgrpc.NewTestServiceClient(cc), opts...)
	}
}

// soak runs interop's soak test briefly, on cc (rpc_soak) or on a channel of
// its own per call (channel_soak).
func soak(newChannel bool) func(context.Context, *grpc.ClientConn, string) {
	return func(ctx context.Context, cc *grpc.ClientConn, addr string) {
		cfg := interop.SoakTestConfig{
			RequestSize: 271828, ResponseSize: 314159, // interop's defaults
			PerIterationMaxAcceptableLatency: 2 * time.Second,
			OverallTimeout:                   30 * time.Second,
			ServerAddr:                       addr,
			NumWorkers:                       1,
			Iterations:                       10,
			ChannelForTest:                   func() (*grpc.ClientConn, func()) { return cc, func() {} },
		}
		if newChannel {
			cfg.ChannelForTest = func() (*grpc.ClientConn, func()) {
				c, err := dial(addr)
				if err != nil {
					grpclog.Component("conformance").Fatalf("dial %s: %v", addr, err)
				}
				return c, func() { _ = c.Close() }
			}
		}
		// DoSoakTest prints every iteration and a histogram to os.Stderr.
		stderr := os.Stderr
		if null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0); err == nil {
			os.Stderr = null
			defer func() { os.Stderr = stderr; _ = null.Close() }()
		}
		interop.DoSoakTest(ctx, cfg)
	}
}

var gz = grpc.UseCompressor(gzip.Name)

// interopCases are the cases of interop/client that need no Google
// credentials, no xDS and no ORCA load-balancing policy (see
// interopNotRun), and the gzip variants of the calls that carry payloads.
var interopCases = []interopCase{
	{"empty_unary", withTestService(interop.DoEmptyUnaryCall)},
	{"large_unary", withTestService(interop.DoLargeUnaryCall)},
	{"client_streaming", withTestService(interop.DoClientStreaming)},
	{"server_streaming", withTestService(interop.DoServerStreaming)},
	{"ping_pong", withTestService(interop.DoPingPong)},
	{"empty_stream", withTestService(interop.DoEmptyStream)},
	{"timeout_on_sleeping_server", withTestService(interop.DoTimeoutOnSleepingServer)},
	{"cancel_after_begin", withTestService(interop.DoCancelAfterBegin)},
	{"cancel_after_first_response", withTestService(interop.DoCancelAfterFirstResponse)},
	{"status_code_and_message", withTestService(interop.DoStatusCodeAndMessage)},
	{"special_status_message", withTestService(interop.DoSpecialStatusMessage)},
	{"custom_metadata", withTestService(interop.DoCustomMetadata)},
	{"unimplemented_method", func(ctx context.Context, cc *grpc.ClientConn, _ string) {
		interop.DoUnimplementedMethod(ctx, cc)
	}},
	{"unimplemented_service", func(ctx context.Context, cc *grpc.ClientConn, _ string) {
		interop.DoUnimplementedService(ctx, testgrpc.NewUnimplementedServiceClient(cc))
	}},
	{"rpc_soak", soak(false)},
	{"channel_soak", soak(true)},
	{"client_compressed_unary", withTestService(interop.DoLargeUnaryCall, gz)},
	{"client_compressed_streaming", withTestService(interop.DoClientStreaming, gz)},
	{"compressed_server_streaming", withTestService(interop.DoServerStreaming, gz)},
	{"compressed_ping_pong", withTestService(interop.DoPingPong, gz)},
}

// compressionUnsupported is why the native transport fails the gzip cases.
const compressionUnsupported = "compressed requests are answered Unimplemented, as internal/grpcserver's doc says (Envoy sends none)"

// interopNativeUnsupported are the cases the native transport does not
// support, with the reason. Each must fail there (and pass on grpc-go),
// and answerUnimplementedToGzip checks the documented answer: a streaming
// case may fail on a Send that sees the call already ended, before its
// Recv would read the status.
var interopNativeUnsupported = map[string]string{
	"client_compressed_unary":     compressionUnsupported,
	"client_compressed_streaming": compressionUnsupported,
	"compressed_server_streaming": compressionUnsupported,
	"compressed_ping_pong":        compressionUnsupported,
}

// answerUnimplementedToGzip checks that a gzip-compressed unary call is
// answered Unimplemented, as the native transport documents.
func answerUnimplementedToGzip(ctx context.Context, cc *grpc.ClientConn) error {
	_, err := testgrpc.NewTestServiceClient(cc).UnaryCall(ctx, &testgrpc.SimpleRequest{
		ResponseType: testgrpc.PayloadType_COMPRESSABLE,
		ResponseSize: 1,
		Payload:      interop.ClientNewPayload(testgrpc.PayloadType_COMPRESSABLE, 1),
	}, gz)
	if err == nil {
		return errors.New("conformance: a gzip-compressed UnaryCall succeeded, want code Unimplemented")
	}
	if status.Code(err) != codes.Unimplemented {
		return fmt.Errorf("conformance: a gzip-compressed UnaryCall = %w, want code Unimplemented", err)
	}
	return nil
}

// interopNotRun are interop/client's cases that run against no local
// server, on either transport, and why.
var interopNotRun = map[string]string{
	"compute_engine_creds":               "needs a GCE VM's service account (Google credentials)",
	"service_account_creds":              "needs a Google service-account key file",
	"jwt_token_creds":                    "needs a Google service-account key file",
	"per_rpc_creds":                      "needs a Google service-account key file",
	"oauth2_auth_token":                  "needs a Google service-account key file",
	"google_default_credentials":         "needs Google default credentials",
	"compute_engine_channel_credentials": "needs a GCE VM's service account (Google credentials)",
	"pick_first_unary":                   "needs a fleet that fills SimpleResponse.server_id; interop.NewTestServer never does, on either transport",
	"orca_per_rpc":                       "needs grpc-go's orca.CallMetricsServerOption (a grpc.ServerOption) and the client's ORCA test LB policy",
	"orca_oob":                           "needs the ORCA OOB service with a metrics recorder and the client's ORCA test LB policy",
}

func dial(addr string) (*grpc.ClientConn, error) {
	return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// TestInterop runs grpc-go's interop client against interop.NewTestServer
// on each server: every case passes, or fails as interopNativeUnsupported
// documents.
func TestInterop(t *testing.T) {
	for _, srv := range interopServers {
		t.Run(srv.name, func(t *testing.T) {
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			stop := srv.start(lis)
			defer stop()
			addr := lis.Addr().String()
			cc, err := dial(addr)
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			for _, c := range interopCases {
				t.Run(c.name, func(t *testing.T) {
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					err := runInterop(func() { c.run(ctx, cc, addr) })
					checkInterop(ctx, t, srv, cc, c.name, err)
				})
			}
		})
	}
}

// checkInterop judges a case's outcome on srv.
func checkInterop(ctx context.Context, t *testing.T, srv interopServer, cc *grpc.ClientConn, name string, err error) {
	t.Helper()
	reason, unsupported := interopNativeUnsupported[name]
	switch {
	case !srv.native || !unsupported:
		if err != nil {
			t.Errorf("interop case %s on %s: %v", name, srv.name, err)
		}
	case err == nil:
		t.Errorf("interop case %s on %s passes, but is listed as unsupported (%s): take it off interopNativeUnsupported", name, srv.name, reason)
	default:
		if perr := answerUnimplementedToGzip(ctx, cc); perr != nil {
			t.Errorf("interop case %s on %s: %v; unsupported because %s, but %v", name, srv.name, err, reason, perr)
			return
		}
		t.Logf("unsupported on %s (%s): %v", srv.name, reason, err)
	}
}

// fatal is where the interop client's Fatal goes: the interop package
// logs a case's failure with Fatal and would exit the process. fatalLogger
// records the message and ends the case's goroutine instead.
var fatal = &fatalLogger{}

// runInterop runs one interop case on a goroutine of its own and returns
// the message it called Fatal with, or nil when it returned.
func runInterop(do func()) error {
	fatal.take() // a stale message of a goroutine that ended otherwise
	returned := false
	done := make(chan struct{})
	go func() {
		defer close(done)
		do()
		returned = true
	}()
	<-done
	if returned {
		return nil
	}
	if msg := fatal.take(); msg != "" {
		return errors.New(msg)
	}
	return errors.New("the case ended its goroutine without a Fatal message")
}

// fatalLogger is a grpclog.LoggerV2 that drops everything but Fatal, which
// it records before runtime.Goexit: interop's Do* functions call Fatal on
// the goroutine that runs them, and grpclog would call os.Exit after it.
type fatalLogger struct {
	mu  sync.Mutex
	msg string
}

var _ grpclog.LoggerV2 = (*fatalLogger)(nil)

// maxFatal bounds a recorded Fatal message.
const maxFatal = 400

func (l *fatalLogger) take() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.msg
	l.msg = ""
	return m
}

func (l *fatalLogger) fatal(msg string) {
	l.mu.Lock()
	if len(msg) > maxFatal { // the cases print whole payloads
		msg = msg[:maxFatal] + "..."
	}
	l.msg = strings.TrimSpace(msg)
	l.mu.Unlock()
	runtime.Goexit()
}

func (l *fatalLogger) Fatal(args ...any)                 { l.fatal(fmt.Sprint(args...)) }
func (l *fatalLogger) Fatalln(args ...any)               { l.fatal(fmt.Sprintln(args...)) }
func (l *fatalLogger) Fatalf(format string, args ...any) { l.fatal(fmt.Sprintf(format, args...)) }
func (l *fatalLogger) Info(...any)                       {}
func (l *fatalLogger) Infoln(...any)                     {}
func (l *fatalLogger) Infof(string, ...any)              {}
func (l *fatalLogger) Warning(...any)                    {}
func (l *fatalLogger) Warningln(...any)                  {}
func (l *fatalLogger) Warningf(string, ...any)           {}
func (l *fatalLogger) Error(...any)                      {}
func (l *fatalLogger) Errorln(...any)                    {}
func (l *fatalLogger) Errorf(string, ...any)             {}
func (l *fatalLogger) V(int) bool                        { return false }

// TestInteropCoversClient checks that every test case of grpc-go's
// interop/client (its -test_case values, read from its source in the
// module cache) is in interopCases or in interopNotRun, so that a grpc
// upgrade that adds a case fails here until the case runs or is listed.
func TestInteropCoversClient(t *testing.T) {
	root, err := testutil.FindRepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	out, err := goCommand(root, "list", "-m", "-f", "{{.Dir}}", "google.golang.org/grpc")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "interop", "client", "client.go"))
	if err != nil {
		t.Fatal(err)
	}
	ours := map[string]bool{}
	for _, c := range interopCases {
		ours[c.name] = true
	}
	for name := range interopNotRun {
		if ours[name] {
			t.Errorf("interop case %s is both run and listed in interopNotRun", name)
		}
		ours[name] = true
	}
	cases := regexp.MustCompile(`(?m)^\s*case "([a-z_]+)":`).FindAllStringSubmatch(string(src), -1)
	if len(cases) < 20 {
		t.Fatalf("interop/client/client.go lists %d test cases, want at least 20: has its switch moved?", len(cases))
	}
	for _, m := range cases {
		if !ours[m[1]] {
			t.Errorf("interop/client's test case %s is neither in interopCases nor in interopNotRun", m[1])
		}
	}
}
