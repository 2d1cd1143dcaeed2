package grpcserver

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestBudgetsSpareBusyClients holds the budgets to what they are for: a
// client that acknowledges every answer with WINDOW_UPDATEs of the stream
// and the connection (as the in-memory client does) makes many times
// junkBurst calls without being cut.
func TestBudgetsSpareBusyClients(t *testing.T) {
	for _, inline := range []bool{true, false} {
		cl := rawClient(t, Options{Inline: inline})
		req := []byte("a request")
		for i := range 3 * junkBurst {
			if _, st, err := cl.Call("/test.Raw/Call", req); err != nil || st != "0" {
				t.Fatalf("inline %v: call %d: grpc-status %q, %v", inline, i, st, err)
			}
		}
	}
}

// TestBudget steps a budget through fixed instants.
func TestBudget(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var b budget
	for i := range 3 {
		if !b.take(t0, 3, 10) {
			t.Fatalf("take %d at t0 = false, want true (burst 3)", i)
		}
	}
	steps := []struct {
		at   time.Duration
		want bool
	}{
		{0, false},                     // empty
		{50 * time.Millisecond, false}, // half a token
		{100 * time.Millisecond, true}, // one token at 10 a second
		{100 * time.Millisecond, false},
		{-time.Second, false},    // the clock went back: nothing added
		{10 * time.Second, true}, // refilled, to the burst only
		{10 * time.Second, true},
		{10 * time.Second, true},
		{10 * time.Second, false},
	}
	for i, s := range steps {
		if got := b.take(t0.Add(s.at), 3, 10); got != s.want {
			t.Errorf("step %d: take(t0%+v) = %v, want %v", i, s.at, got, s.want)
		}
	}
}

// TestDerivedContextsOutliveTheCall: a handler on a goroutine may derive a
// context from its call's and keep it past its return (the DynamoDB store
// does, for its backend timeout); the runtime then follows the call's
// context on a goroutine of its own. The call's context stays whole: no
// crash, no race, and the derived context ends when the call does.
func TestDerivedContextsOutliveTheCall(t *testing.T) {
	var mu sync.Mutex
	var kept []context.Context
	var cancels []context.CancelFunc
	fx := start(t, Options{}, func(ctx context.Context, in *wrapperspb.BytesValue) (*wrapperspb.BytesValue, error) {
		child, cancel := context.WithCancel(ctx)
		mu.Lock()
		kept, cancels = append(kept, child), append(cancels, cancel)
		mu.Unlock()
		return in, nil
	})
	defer func() {
		for _, cancel := range cancels {
			cancel()
		}
	}()
	cc := dial(t, fx.addr)
	for range 200 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a deadline: the call's context is not the runtime's own type
		if _, err := echo(cc, ctx, []byte("x")); err != nil {
			t.Fatal(err)
		}
		cancel()
	}
	mu.Lock()
	defer mu.Unlock()
	for i, child := range kept {
		select {
		case <-child.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("the context derived in call %d is not done 10 s after its call ended", i)
		}
	}
}

// TestCancellationsAreNotAttacks: a client whose calls time out against a
// slow store (Envoy's timeout, well under BACKEND_TIMEOUT) resets each one
// after rapidResetAge; however many it resets, that is not rapid reset,
// and its connection stays open.
func TestCancellationsAreNotAttacks(t *testing.T) {
	fx := start(t, Options{}, func(ctx context.Context, in *wrapperspb.BytesValue) (*wrapperspb.BytesValue, error) {
		<-ctx.Done() // a store that does not answer in time
		return nil, ctx.Err()
	})
	var dials atomic.Int32
	cc := dial(t, fx.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			dials.Add(1)
			return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		}))
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			for range 3 * resetBurst / 50 {
				// Cancelled by the client alone (no grpc-timeout the server
				// would act on first): it sends RST_STREAM.
				ctx, cancel := context.WithCancel(context.Background())
				time.AfterFunc(2*rapidResetAge, cancel)
				_, err := echo(cc, ctx, []byte("x"))
				if status.Code(err) != codes.Canceled {
					t.Errorf("a call its client cancelled = %v, want Canceled", err)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := dials.Load(); n != 1 {
		t.Errorf("the client dialed %d times, want 1: the server closed a connection whose calls only timed out", n)
	}
}
