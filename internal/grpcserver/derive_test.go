package grpcserver

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/dynalimit/dynalimit/internal/grpcserver/wiretest"
)

// deriveDesc's handler derives a context from its call's, as a handler
// that bounds a store call does, and counts the goroutines that the
// derivation started: context.WithTimeout follows a parent of a type it
// does not know on a goroutine of its own, which outlives an inline call
// whose context is recycled.
var deriveDesc = grpc.ServiceDesc{
	ServiceName: "test.Derive",
	HandlerType: (*rawServer)(nil),
	Methods: []grpc.MethodDesc{{MethodName: "Call", Handler: func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
		if err := dec(&rawIn); err != nil {
			return nil, err
		}
		before := runtime.NumGoroutine()
		d, cancel := context.WithTimeout(ctx, time.Minute)
		after := runtime.NumGoroutine()
		cancel()
		<-d.Done()
		srv.(*deriveCount).started.Add(int64(after - before))
		return &answer, nil
	}}},
}

type deriveCount struct{ started atomic.Int64 }

// TestDerivedContextsStartNoGoroutine: a context derived from an inline
// call's, with a deadline or without, follows it through AfterFunc, not
// through a goroutine watching a context that the next call reuses.
func TestDerivedContextsStartNoGoroutine(t *testing.T) {
	for _, timeout := range []string{"", "20m"} {
		count := &deriveCount{}
		srv := New(Options{Inline: true, Codec: rawCodec{}})
		srv.RegisterService(&deriveDesc, count)
		cl := wiretest.Dial(t, srv).WithTimeout(timeout)
		for range 200 {
			if _, st, err := cl.Call("/test.Derive/Call", []byte("x")); err != nil || st != "0" {
				t.Fatalf("timeout %q: grpc-status %q, %v", timeout, st, err)
			}
		}
		if n := count.started.Load(); n > 10 {
			t.Errorf("timeout %q: deriving a context in 200 calls started %d goroutines", timeout, n)
		}
	}
}
