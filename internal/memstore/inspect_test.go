package memstore

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// TestInspectReset drives a bucket through consumes, inspections and a
// reset at fixed instants: Inspect reads what a check would and consumes
// nothing; Reset refills to capacity what is held, and only that.
func TestInspectReset(t *testing.T) {
	at := time.UnixMilli(1_700_000_000_000)
	s := New(WithClock(func() time.Time { return at }), WithNamespace("default"))
	ctx := context.Background()
	key := cascade.Key{Namespace: "default", Entity: "e", Resource: "api"}
	other := debit("f", slow, cascade.Consume, 1000)
	other.Limit = "tpm"
	mustAcquire(t, s, other)

	levels, now, err := s.Inspect(ctx, key, map[string]tokenbucket.Limit{"rpm": slow})
	if err != nil || !now.Equal(at) {
		t.Fatalf("Inspect(new bucket) = _, %v, %v, want %v, nil", now, err, at)
	}
	if want := []LimitLevel{{Name: "rpm", Limit: slow, Tokens: 3000}}; !slices.Equal(levels, want) {
		t.Fatalf("Inspect(new bucket) = %+v, want %+v", levels, want)
	}
	if _, reset, err := s.Reset(ctx, key, nil); reset || err != nil {
		t.Fatalf("Reset(new bucket) = _, %v, %v, want false, nil", reset, err)
	}

	mustAcquire(t, s, debit("e", slow, cascade.Consume, 2000))
	for range 3 { // inspecting consumes nothing
		levels, _, _ = s.Inspect(ctx, cascade.Key{Entity: "e", Resource: "api"}, nil)
		want := []LimitLevel{{Name: "rpm", Limit: slow, Tokens: 1000, FullIn: 40 * time.Second, Stored: true}}
		if !slices.Equal(levels, want) {
			t.Fatalf("Inspect(after 2 tokens) = %+v, want %+v", levels, want)
		}
	}
	if got := remaining(t, s, "e", slow); got != 1000 {
		t.Fatalf("remaining after inspections = %d, want 1000", got)
	}

	before, reset, err := s.Reset(ctx, key, nil)
	if err != nil || !reset || len(before) != 1 || before[0].Tokens != 1000 {
		t.Fatalf("Reset = %+v, %v, %v, want 1 level of 1000, true, nil", before, reset, err)
	}
	if got := remaining(t, s, "e", slow); got != 3000 {
		t.Fatalf("remaining after reset = %d, want 3000", got)
	}
	// The other bucket is untouched.
	levels, _, _ = s.Inspect(ctx, cascade.Key{Namespace: "default", Entity: "f", Resource: "api"}, nil)
	if len(levels) != 1 || levels[0].Name != "tpm" || levels[0].Tokens != 2000 {
		t.Fatalf("Inspect(other bucket) = %+v, want tpm at 2000", levels)
	}
}

func TestInspectDoneContext(t *testing.T) {
	s := New()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := s.Inspect(ctx, cascade.Key{}, nil); err == nil {
		t.Error("Inspect(done context) error = nil, want one")
	}
	if _, _, err := s.Reset(ctx, cascade.Key{}, nil); err == nil {
		t.Error("Reset(done context) error = nil, want one")
	}
}
