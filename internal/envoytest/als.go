package envoytest

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"

	datav3 "github.com/envoyproxy/go-control-plane/envoy/data/accesslog/v3"
	alsv3 "github.com/envoyproxy/go-control-plane/envoy/service/accesslog/v3"
	"google.golang.org/grpc"
)

// ALS is a test receiver of Envoy's gRPC access-log service
// (envoy.service.accesslog.v3.AccessLogService): it keeps every HTTP entry
// it is sent.
type ALS struct {
	alsv3.UnimplementedAccessLogServiceServer

	// Addr is its host:port on 127.0.0.1.
	Addr string

	mu      sync.Mutex
	entries []*datav3.HTTPAccessLogEntry
	logName string
}

var _ alsv3.AccessLogServiceServer = (*ALS)(nil)

// StartALS serves the receiver on a free port until the test's cleanup.
func StartALS(t testing.TB) *ALS {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("envoytest: access-log receiver: %v", err)
	}
	a := &ALS{Addr: ln.Addr().String()}
	srv := grpc.NewServer()
	alsv3.RegisterAccessLogServiceServer(srv, a)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Stop()
		if err := <-done; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			t.Errorf("envoytest: access-log receiver: %v", err)
		}
	})
	return a
}

// StreamAccessLogs keeps the HTTP entries of one Envoy stream.
func (a *ALS) StreamAccessLogs(stream alsv3.AccessLogService_StreamAccessLogsServer) error {
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		a.mu.Lock()
		if id := msg.GetIdentifier(); id != nil {
			a.logName = id.GetLogName()
		}
		a.entries = append(a.entries, msg.GetHttpLogs().GetLogEntry()...)
		a.mu.Unlock()
	}
}

// Entries returns the HTTP entries received so far.
func (a *ALS) Entries() []*datav3.HTTPAccessLogEntry {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]*datav3.HTTPAccessLogEntry(nil), a.entries...)
}

// LogName returns the log name of the streams' identifier.
func (a *ALS) LogName() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.logName
}
