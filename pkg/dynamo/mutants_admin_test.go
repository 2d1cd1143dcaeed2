package dynamo_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/admin"
	"github.com/dynalimit/dynalimit/pkg/dynamo/usage"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// Equivalent mutants, read by internal/mutants (make mutation):
//
// mutant: ARITHMETIC_BASE namespaces.go `len(from)+1` moveNamespace: a capacity hint; every caller names at least one state to move from, so len(from)−1 is never negative.
// mutant: CONDITIONALS_BOUNDARY namespaces.go `out[i].Name < out[j].Name` Orphans: each orphan is one key prefix and the escape is one to one, so no two names are equal and `<=` sorts them the same.

// TestAdminWritesFailLoudly: an audit record that cannot be written, a
// namespace state change that fails, a purge whose batch delete fails and
// a stream checkpoint cancelled without a reason are errors.
func TestAdminWritesFailLoudly(t *testing.T) {
	ctx := context.Background()
	lim := map[string]tokenbucket.Limit{"rpm": mustLimit(t, 10, time.Minute, 0)}

	f := fakeTable(t)
	s := newStore(t, f, "t", newClock())
	failOn(f, "PutItem", 2, serverError()) // the limits record lands, its audit record not
	if err := admin.New(s).SetLimits(ctx, admin.Scope{Resource: "r"}, lim); !errors.Is(err, dynamo.ErrUnavailable) {
		t.Errorf("SetLimits() with its audit failing = %v, want ErrUnavailable", err)
	}

	f = fakeTable(t)
	s = newStore(t, f, "t", newClock())
	if _, err := admin.New(s).RegisterNamespace(ctx, "team-a"); err != nil {
		t.Fatal(err)
	}
	failOn(f, "UpdateItem", 0, serverError())
	if _, err := admin.New(s).DeleteNamespace(ctx, "team-a"); !errors.Is(err, dynamo.ErrUnavailable) {
		t.Errorf("DeleteNamespace() with its update failing = %v, want ErrUnavailable", err)
	}

	f = fakeTable(t)
	s = newStore(t, f, "t", newClock())
	p := &cascade.Plan{Debits: []cascade.Debit{{Key: cascade.Key{Namespace: "stray", Entity: "e", Resource: "r"}, Limit: "rpm", Bucket: lim["rpm"], Amount: tokenbucket.PerToken}}}
	if _, err := s.Acquire(ctx, p); err != nil {
		t.Fatal(err)
	}
	failOn(f, "BatchWriteItem", 0, serverError())
	if _, err := admin.New(s).PurgeNamespace(ctx, "stray", nil); !errors.Is(err, dynamo.ErrUnavailable) {
		t.Errorf("PurgeNamespace() with its deletes failing = %v, want ErrUnavailable", err)
	}

	failOn(f, "TransactWriteItems", 0, &types.TransactionCanceledException{Message: aws.String("cancelled")})
	if err := usage.Of(s).SetStreamCheckpoint(ctx, "me", "shard-1", usage.Checkpoint{Sequence: "1"}); err == nil {
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
	if n, err := admin.New(s).PurgeNamespace(ctx, "stray", nil); err != nil || n != 1 {
		t.Fatalf("PurgeNamespace(stray) = %d, %v, want 1 item", n, err)
	}
	if ns, err := admin.New(s).Namespace(ctx, "stray"); err != nil || ns.State != admin.NamespacePurged {
		t.Errorf("Namespace(stray) after its purge = %+v, %v, want purged", ns, err)
	}
}

// TestPurgeSendsUnprocessedAgain: deletes that DynamoDB leaves unprocessed
// are sent again after 50 ms, the wait doubling up to 2 s, 10 times in all;
// then the purge fails as throttled. When DynamoDB takes them before that,
// the purge goes on and counts them.
func TestPurgeSendsUnprocessedAgain(t *testing.T) {
	for _, c := range []struct {
		left      int64 // tries DynamoDB leaves the deletes unprocessed (-1: every one)
		wantCalls int64
		wantWait  time.Duration
		wantErr   error
	}{
		{left: 3, wantCalls: 4, wantWait: 350 * time.Millisecond},
		{left: -1, wantCalls: 10, wantWait: 9150 * time.Millisecond, wantErr: dynamo.ErrThrottled},
	} {
		t.Run(strconv.FormatInt(c.left, 10), func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
				defer cancel()
				api := &unprocessed{API: fakeTable(t), left: c.left}
				s := newStore(t, api, "t", newClock())
				p := &cascade.Plan{Debits: []cascade.Debit{{Key: cascade.Key{Namespace: "stray", Entity: "e", Resource: "r"}, Limit: "rpm", Bucket: mustLimit(t, 10, time.Minute, 0), Amount: tokenbucket.PerToken}}}
				if _, err := s.Acquire(ctx, p); err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				n, err := admin.New(s).PurgeNamespace(ctx, "stray", nil)
				waited := time.Since(start)
				if !errors.Is(err, c.wantErr) || (c.wantErr == nil && n != 1) {
					t.Errorf("PurgeNamespace() with the deletes left unprocessed %d times = %d, %v, want 1 item and %v", c.left, n, err, c.wantErr)
				}
				if got := api.calls.Load(); got != c.wantCalls || waited != c.wantWait {
					t.Errorf("BatchWriteItem sent %d times over %v, want %d over %v", got, waited, c.wantCalls, c.wantWait)
				}
			})
		})
	}
}

// unprocessed is a table whose BatchWriteItem leaves every request
// unprocessed, the first left times (every time when left is negative).
type unprocessed struct {
	dynamo.API
	left  int64
	calls atomic.Int64
}

func (u *unprocessed) BatchWriteItem(ctx context.Context, in *dynamodb.BatchWriteItemInput, o ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error) {
	if n := u.calls.Add(1); u.left < 0 || n <= u.left {
		return &dynamodb.BatchWriteItemOutput{UnprocessedItems: in.RequestItems}, nil
	}
	return u.API.BatchWriteItem(ctx, in, o...)
}

// TestEntityNamesItsNamespace: an entity record without a namespace
// attribute (written before records carried one) is read as of the
// namespace it was asked in; one with the attribute keeps it.
func TestEntityNamesItsNamespace(t *testing.T) {
	ctx := context.Background()
	f := fakeTable(t)
	s := newStore(t, f, "t", newClock())
	if _, err := f.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("t"), Item: map[string]types.AttributeValue{
		"PK": &types.AttributeValueMemberS{Value: "nteam-a/ENTITY#old"},
		"SK": &types.AttributeValueMemberS{Value: "#META"},
		"id": &types.AttributeValueMemberS{Value: "old"},
	}}); err != nil {
		t.Fatal(err)
	}
	if e, err := admin.New(s).Entity(ctx, "team-a", "old"); err != nil || e.Namespace != "team-a" || e.ID != "old" {
		t.Errorf("Entity(team-a, old) without a namespace attribute = %+v, %v, want namespace team-a", e, err)
	}
	if err := admin.New(s).PutEntity(ctx, dynamo.Entity{Namespace: "team-b", ID: "new"}); err != nil {
		t.Fatal(err)
	}
	if e, err := admin.New(s).Entity(ctx, "team-b", "new"); err != nil || e.Namespace != "team-b" {
		t.Errorf("Entity(team-b, new) = %+v, %v, want namespace team-b", e, err)
	}
}

// TestNamespaceStatesOfUnregistered: a name with no registry record has no
// state.
func TestNamespaceStatesOfUnregistered(t *testing.T) {
	s := newStore(t, fakeTable(t), "t", newClock())
	if _, err := admin.New(s).RegisterNamespace(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	got, err := admin.New(s).NamespaceStates(context.Background(), []string{"a", "b"})
	if _, has := got["b"]; err != nil || got["a"] != admin.NamespaceActive || has {
		t.Errorf("NamespaceStates(a, b) = %v, %v, want only a, active", got, err)
	}
}

// TestStreamLeaseTTL: the lease record lives its lease and 48 hours more.
func TestStreamLeaseTTL(t *testing.T) {
	f := fakeTable(t)
	c := newClock()
	s := newStore(t, f, "t", c)
	if ok, err := usage.Of(s).StreamLease(context.Background(), "me", time.Minute); err != nil || !ok {
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
