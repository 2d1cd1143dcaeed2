package grpcserver

import (
	"testing"
	"time"
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
