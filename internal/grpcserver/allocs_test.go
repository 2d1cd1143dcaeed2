package grpcserver

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"

	"github.com/dynalimit/dynalimit/internal/grpcserver/wiretest"
	"github.com/dynalimit/dynalimit/internal/israce"
)

// rawCodec passes messages as byte slices: the handler below allocates
// nothing, so what is counted is the transport's.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }
func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}
func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}
func (rawCodec) UnmarshalBytes(b []byte, v any) error {
	*v.(*[]byte) = b
	return nil
}
func (rawCodec) MarshalAppend(b []byte, v any) ([]byte, error) {
	return append(b, *v.(*[]byte)...), nil
}

var _ encoding.CodecV2 = rawCodec{}

type rawServer interface{}

// rawIn is where the raw handler decodes a request: calls come one at a
// time, and a variable of the handler's own would be an allocation.
var rawIn []byte

// answer is the raw handler's answer, whatever the request.
var answer = []byte("0123456789abcdef0123456789abcdef")

var rawDesc = grpc.ServiceDesc{
	ServiceName: "test.Raw",
	HandlerType: (*rawServer)(nil),
	Methods: []grpc.MethodDesc{{MethodName: "Call", Handler: func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		if err := dec(&rawIn); err != nil {
			return nil, err
		}
		if len(rawIn) == 0 {
			return nil, errors.New("empty request")
		}
		return &answer, nil
	}}},
}

func rawClient(tb testing.TB, o Options) *wiretest.Client {
	o.Codec = rawCodec{}
	srv := New(o)
	srv.RegisterService(&rawDesc, struct{}{})
	return wiretest.Dial(tb, srv)
}

// TestAllocationsPerCall holds the transport's allocations per unary call
// to their measured counts: none for a call answered on the reader, with
// or without a deadline; a change that adds one fails here.
func TestAllocationsPerCall(t *testing.T) {
	if israce.Enabled {
		t.Skip("allocation counts differ under -race (sync.Pool drops items); make test runs this without it")
	}
	cases := []struct {
		name    string
		o       Options
		timeout string
		ceiling float64
	}{
		{"inline", Options{Inline: true}, "", 0},
		{"inline with deadline", Options{Inline: true}, "20m", 0},
		// A goroutine and its closure, the call's cancel context (made
		// before the goroutine starts, so that a reset cancels it; being a
		// child of the connection's own, it needs no goroutine to follow
		// its parent, as it did when it wrapped the deadline) and its
		// deadline, the call's own context (grpc.SetHeader finds the call
		// in it), the request's copy.
		{"goroutine with deadline", Options{}, "20m", 8},
	}
	req := []byte("a request of some thirty bytes.")
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cl := rawClient(t, c.o).WithTimeout(c.timeout)
			call := func() {
				out, st, err := cl.Call("/test.Raw/Call", req)
				if err != nil || st != "0" || string(out) != string(answer) {
					t.Fatalf("call: %q grpc-status %q, %v", out, st, err)
				}
			}
			for range 10 {
				call() // the header tables fill, the buffers grow
			}
			got := testing.AllocsPerRun(500, call)
			t.Logf("%s: %.1f allocations a call", c.name, got)
			if got > c.ceiling {
				t.Errorf("%s: %.1f allocations a call, ceiling %.0f: a change added one", c.name, got, c.ceiling)
			}
		})
	}
}

// BenchmarkCall is one unary call through the transport, the handler doing
// nothing: the transport's cost per call, one call at a time.
func BenchmarkCall(b *testing.B) {
	for _, inline := range []bool{true, false} {
		name := "goroutine"
		if inline {
			name = "inline"
		}
		b.Run(name, func(b *testing.B) {
			cl := rawClient(b, Options{Inline: inline}).WithTimeout("20m")
			req := []byte("a request of some thirty bytes.")
			b.ReportAllocs()
			for b.Loop() {
				if _, st, err := cl.Call("/test.Raw/Call", req); err != nil || st != "0" {
					b.Fatalf("grpc-status %q, %v", st, err)
				}
			}
		})
	}
}
