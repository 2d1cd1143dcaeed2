package dynamo_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/usage"
)

// TestStreamLease: one poller holds the lease until its time passes; only
// the holder moves a checkpoint.
func TestStreamLease(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.Name, func(t *testing.T) {
			api, table := b.API(t)
			c := newClock()
			s := newStore(t, api, table, c)
			ctx := context.Background()
			held := func(owner string) bool {
				t.Helper()
				ok, err := usage.Of(s).StreamLease(ctx, owner, 10*time.Second)
				if err != nil {
					t.Fatalf("StreamLease(%s) = %v", owner, err)
				}
				return ok
			}
			if !held("a") {
				t.Fatal("a could not take a free lease")
			}
			if !held("a") {
				t.Fatal("a could not renew its lease")
			}
			if held("b") {
				t.Fatal("b took a's lease before its time passed")
			}
			if err := usage.Of(s).SetStreamCheckpoint(ctx, "b", "shard-1", usage.Checkpoint{Sequence: "9"}); !errors.Is(err, dynamo.ErrConflict) {
				t.Errorf("b's checkpoint without the lease = %v, want ErrConflict", err)
			}
			if err := usage.Of(s).SetStreamCheckpoint(ctx, "a", "shard-1", usage.Checkpoint{Sequence: "7"}); err != nil {
				t.Fatalf("a's checkpoint = %v", err)
			}
			c.Advance(11 * time.Second)
			if !held("b") {
				t.Fatal("b could not take the lease after a's time passed")
			}
			if err := usage.Of(s).SetStreamCheckpoint(ctx, "a", "shard-1", usage.Checkpoint{Sequence: "3", Closed: true}); !errors.Is(err, dynamo.ErrConflict) {
				t.Errorf("a's checkpoint after losing the lease = %v, want ErrConflict", err)
			}
			cp, err := usage.Of(s).StreamCheckpoint(ctx, "shard-1")
			if err != nil || cp != (usage.Checkpoint{Sequence: "7"}) {
				t.Errorf("checkpoint = %+v, %v; want sequence 7, open", cp, err)
			}
			if owner, _, err := usage.Of(s).StreamLeaseHolder(ctx); err != nil || owner != "b" {
				t.Errorf("holder = %q, %v; want b", owner, err)
			}
		})
	}
}
