package dynamo_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// Equivalent mutants, read by internal/mutants (make mutation):
//
// mutant: ARITHMETIC_BASE namespaces.go `len(from)+1` moveNamespace: a capacity hint; every caller names at least one state to move from, so len(from)−1 is never negative.
// mutant: ARITHMETIC_BASE purge.go `50 * time.Millisecond` deleteBatch: the first wait between tries of what DynamoDB left unprocessed; timing only, the tries are bounded by purgeRetries either way.

// TestAdminWritesFailLoudly: an audit record that cannot be written, a
// namespace state change that fails, a purge whose batch delete fails and
// a stream checkpoint cancelled without a reason are errors.
func TestAdminWritesFailLoudly(t *testing.T) {
	ctx := context.Background()
	lim := map[string]tokenbucket.Limit{"rpm": mustLimit(t, 10, time.Minute, 0)}

	f := fakeTable(t)
	s := newStore(t, f, "t", newClock())
	failOn(f, "PutItem", 2, serverError()) // the limits record lands, its audit record not
	if err := s.SetLimits(ctx, dynamo.Scope{Resource: "r"}, lim); !errors.Is(err, dynamo.ErrUnavailable) {
		t.Errorf("SetLimits() with its audit failing = %v, want ErrUnavailable", err)
	}

	f = fakeTable(t)
	s = newStore(t, f, "t", newClock())
	if _, err := s.RegisterNamespace(ctx, "team-a"); err != nil {
		t.Fatal(err)
	}
	failOn(f, "UpdateItem", 0, serverError())
	if _, err := s.DeleteNamespace(ctx, "team-a"); !errors.Is(err, dynamo.ErrUnavailable) {
		t.Errorf("DeleteNamespace() with its update failing = %v, want ErrUnavailable", err)
	}

	f = fakeTable(t)
	s = newStore(t, f, "t", newClock())
	p := &cascade.Plan{Debits: []cascade.Debit{{Key: cascade.Key{Namespace: "stray", Entity: "e", Resource: "r"}, Limit: "rpm", Bucket: lim["rpm"], Amount: tokenbucket.PerToken}}}
	if _, err := s.Acquire(ctx, p); err != nil {
		t.Fatal(err)
	}
	failOn(f, "BatchWriteItem", 0, serverError())
	if _, err := s.PurgeNamespace(ctx, "stray", nil); !errors.Is(err, dynamo.ErrUnavailable) {
		t.Errorf("PurgeNamespace() with its deletes failing = %v, want ErrUnavailable", err)
	}

	failOn(f, "TransactWriteItems", 0, &types.TransactionCanceledException{Message: aws.String("cancelled")})
	if err := s.SetStreamCheckpoint(ctx, "me", "shard-1", dynamo.Checkpoint{Sequence: "1"}); err == nil {
		t.Error("SetStreamCheckpoint() cancelled without a reason = nil error")
	}
}

// TestPurgeOrphanRegistersIt: purging a namespace with items and no record
// registers it and marks it purged.
func TestPurgeOrphanRegistersIt(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, fakeTable(t), "t", newClock())
	p := &cascade.Plan{Debits: []cascade.Debit{{Key: cascade.Key{Namespace: "stray", Entity: "e", Resource: "r"}, Limit: "rpm", Bucket: mustLimit(t, 10, time.Minute, 0), Amount: tokenbucket.PerToken}}}
	if _, err := s.Acquire(ctx, p); err != nil {
		t.Fatal(err)
	}
	if n, err := s.PurgeNamespace(ctx, "stray", nil); err != nil || n != 1 {
		t.Fatalf("PurgeNamespace(stray) = %d, %v, want 1 item", n, err)
	}
	if ns, err := s.Namespace(ctx, "stray"); err != nil || ns.State != dynamo.NamespacePurged {
		t.Errorf("Namespace(stray) after its purge = %+v, %v, want purged", ns, err)
	}
}

// TestPurgeGivesUpOnUnprocessed: deletes that DynamoDB keeps leaving
// unprocessed are sent again 10 times, then the purge fails as throttled.
func TestPurgeGivesUpOnUnprocessed(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		f := fakeTable(t)
		s := newStore(t, &unprocessed{API: f}, "t", newClock())
		p := &cascade.Plan{Debits: []cascade.Debit{{Key: cascade.Key{Namespace: "stray", Entity: "e", Resource: "r"}, Limit: "rpm", Bucket: mustLimit(t, 10, time.Minute, 0), Amount: tokenbucket.PerToken}}}
		if _, err := s.Acquire(ctx, p); err != nil {
			t.Fatal(err)
		}
		if _, err := s.PurgeNamespace(ctx, "stray", nil); !errors.Is(err, dynamo.ErrThrottled) {
			t.Errorf("PurgeNamespace() with every delete left unprocessed = %v, want ErrThrottled", err)
		}
	})
}

type unprocessed struct{ dynamo.API }

func (u *unprocessed) BatchWriteItem(_ context.Context, in *dynamodb.BatchWriteItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error) {
	return &dynamodb.BatchWriteItemOutput{UnprocessedItems: in.RequestItems}, nil
}

// TestNamespaceStatesOfUnregistered: a name with no registry record has no
// state.
func TestNamespaceStatesOfUnregistered(t *testing.T) {
	s := newStore(t, fakeTable(t), "t", newClock())
	if _, err := s.RegisterNamespace(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	got, err := s.NamespaceStates(context.Background(), []string{"a", "b"})
	if _, has := got["b"]; err != nil || got["a"] != dynamo.NamespaceActive || has {
		t.Errorf("NamespaceStates(a, b) = %v, %v, want only a, active", got, err)
	}
}

// TestStreamLeaseTTL: the lease record lives its lease and 48 hours more.
func TestStreamLeaseTTL(t *testing.T) {
	f := fakeTable(t)
	c := newClock()
	s := newStore(t, f, "t", c)
	if ok, err := s.StreamLease(context.Background(), "me", time.Minute); err != nil || !ok {
		t.Fatalf("StreamLease() = %t, %v", ok, err)
	}
	want := strconv.FormatInt(c.Now().Add(time.Minute+48*time.Hour).Unix(), 10)
	found := false
	for _, it := range f.Items("t") {
		if o, ok := it["owner"].(*types.AttributeValueMemberS); ok && o.Value == "me" {
			found = true
			if got := it["ttl"].(*types.AttributeValueMemberN).Value; got != want {
				t.Errorf("lease ttl = %s, want %s", got, want)
			}
		}
	}
	if !found {
		t.Error("no lease record")
	}
}
