package dynamo_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/admin"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// Equivalent mutants, read by internal/mutants (make mutation):
//
// mutant: CONDITIONALS_BOUNDARY resolve.go `len(stale) > 0` resolve: loadRecords of no keys starts no read (fly has nothing to start) and returns no flight.
// mutant: CONDITIONALS_BOUNDARY resolve.go `len(missing) > 0` resolve: likewise, no flight to wait for.
// mutant: ARITHMETIC_BASE resolve.go `int64(ttl)/5+1` cacheTTL: the largest jitter becomes 2 ns shorter, out of ±10% of the TTL.
// mutant: CONDITIONALS_BOUNDARY resolve.go `round > 0` batchGet: a first wait of at most a millisecond before the first call: timing only, every call reads the same.

// TestLimitsWritesFailClosed: SetLimits whose read of the limits stored
// fails writes nothing (it would drop what it could not read), and
// SetLimits whose write fails, or DeleteLimits whose delete fails, says
// so.
func TestLimitsWritesFailClosed(t *testing.T) {
	f := fakeTable(t)
	s := newStore(t, f, "t", newClock())
	ctx := context.Background()
	sc := admin.Scope{Resource: "r"}
	lim := map[string]tokenbucket.Limit{"rpm": mustLimit(t, 10, time.Minute, 0)}
	if err := admin.New(s).SetLimits(ctx, sc, lim); err != nil {
		t.Fatal(err)
	}
	failOn(f, "GetItem", 0, serverError())
	puts := f.Calls("PutItem")
	if err := admin.New(s).SetLimits(ctx, sc, map[string]tokenbucket.Limit{"rps": mustLimit(t, 1, time.Second, 0)}); err == nil || f.Calls("PutItem") != puts {
		t.Errorf("SetLimits with its read failing = %v after %d writes, want an error and none", err, f.Calls("PutItem")-puts)
	}
	failOn(f, "PutItem", 0, serverError())
	if err := admin.New(s).SetLimits(ctx, sc, map[string]tokenbucket.Limit{"rps": mustLimit(t, 1, time.Second, 0)}); !errors.Is(err, dynamo.ErrUnavailable) || !strings.Contains(err.Error(), "put limits") {
		t.Errorf("SetLimits with PutItem failing = %v, want ErrUnavailable from putting the limits", err)
	}
	failOn(f, "DeleteItem", 0, serverError())
	if err := admin.New(s).DeleteLimits(ctx, sc); !errors.Is(err, dynamo.ErrUnavailable) {
		t.Errorf("DeleteLimits with DeleteItem failing = %v, want ErrUnavailable", err)
	}
}

// TestLimitsRecordNamesItsEntity: an entity's limits record carries the
// entity (what the namespace tools find it by); a resource's does not.
func TestLimitsRecordNamesItsEntity(t *testing.T) {
	f := fakeTable(t)
	s := newStore(t, f, "t", newClock())
	lim := map[string]tokenbucket.Limit{"rpm": mustLimit(t, 10, time.Minute, 0)}
	for _, sc := range []admin.Scope{{Entity: "acme", Resource: "r"}, {Resource: "q"}} {
		if err := admin.New(s).SetLimits(context.Background(), sc, lim); err != nil {
			t.Fatal(err)
		}
	}
	found := 0
	for _, it := range f.Items("t") {
		pk := pkOf(it)
		if _, ok := it["limits"]; !ok {
			continue
		}
		e, has := it["entity"].(*types.AttributeValueMemberS)
		switch {
		case strings.Contains(pk, "acme"):
			found++
			if !has || e.Value != "acme" {
				t.Errorf("limits record %s: entity %v, want acme", pk, it["entity"])
			}
		default:
			found++
			if has {
				t.Errorf("limits record %s: entity %q, want none", pk, e.Value)
			}
		}
	}
	if found != 2 {
		t.Errorf("found %d limits records, want 2", found)
	}
}

// TestStaleLimitsRefresh: a replica whose cached limits are past their
// lifetime keeps deciding on them while it reads them again in the
// background, then decides on what is stored now.
func TestStaleLimitsRefresh(t *testing.T) {
	f := fakeTable(t)
	clk := newClock()
	adm := admin.New(newStore(t, f, "t", clk))
	s := newStore(t, f, "t", clk)
	ctx := context.Background()
	sc := admin.Scope{Resource: "r"}
	if err := adm.SetLimits(ctx, sc, map[string]tokenbucket.Limit{"x": mustLimit(t, 1, time.Hour, 0)}); err != nil {
		t.Fatal(err)
	}
	p := &cascade.Plan{Debits: []cascade.Debit{{Key: cascade.Key{Entity: "e", Resource: "r"}, Limit: "x", Bucket: mustLimit(t, 1000, time.Second, 0), Amount: tokenbucket.PerToken}}}
	for i, want := range []bool{true, false} {
		if dec, err := s.Acquire(ctx, p); err != nil || dec.Admitted != want {
			t.Fatalf("Acquire() #%d on 1/hour = %+v, %v, want admitted %t", i+1, dec, err, want)
		}
	}
	if err := adm.SetLimits(ctx, sc, map[string]tokenbucket.Limit{"x": mustLimit(t, 1000, time.Second, 0)}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(2 * dynamo.DefaultConfigCacheTTL)
	deadline := time.Now().Add(5 * time.Second)
	for {
		dec, err := s.Acquire(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if dec.Statuses[0].Bucket.Capacity == 1000*tokenbucket.PerToken {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Acquire() 2 minutes on = %+v, want the limits stored now (1000/s) read again", dec)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestStoredLimitAppliesWithinTTL pins when `limits set` applies: to the
// first decision a replica makes ConfigCacheTTL after it, however long the
// replica was idle (it once served a stale record to that decision, and
// applied the new one a decision later: two minutes, with a minute's TTL
// and sparse requests).
func TestStoredLimitAppliesWithinTTL(t *testing.T) {
	for _, idle := range []time.Duration{dynamo.DefaultConfigCacheTTL, 2 * dynamo.DefaultConfigCacheTTL} {
		f := fakeTable(t)
		clk := newClock()
		adm := admin.New(newStore(t, f, "t", clk))
		s := newStore(t, f, "t", clk)
		ctx := context.Background()
		sc := admin.Scope{Entity: "e", Resource: "r"}
		if err := adm.SetLimits(ctx, sc, map[string]tokenbucket.Limit{"x": mustLimit(t, 3, time.Minute, 0)}); err != nil {
			t.Fatal(err)
		}
		p := &cascade.Plan{Debits: []cascade.Debit{{Key: cascade.Key{Entity: "e", Resource: "r"}, Limit: "x", Bucket: mustLimit(t, 1, time.Hour, 0), Amount: tokenbucket.PerToken}}}
		if dec, err := s.Acquire(ctx, p); err != nil || dec.Statuses[0].Bucket.Capacity != 3*tokenbucket.PerToken {
			t.Fatalf("Acquire() = %+v, %v, want the stored 3/min", dec, err)
		}
		if err := adm.SetLimits(ctx, sc, map[string]tokenbucket.Limit{"x": mustLimit(t, 5, time.Minute, 0)}); err != nil {
			t.Fatal(err)
		}
		clk.Advance(idle)
		if dec, err := s.Acquire(ctx, p); err != nil || dec.Statuses[0].Bucket.Capacity != 5*tokenbucket.PerToken {
			t.Errorf("first Acquire() %v after limits set = %+v, %v, want the new 5/min", idle, dec, err)
		}
	}
}

// TestCreateTableSchemaRecord: CreateTable fails when its schema version
// record cannot be written, or when the table holds another version.
func TestCreateTableSchemaRecord(t *testing.T) {
	f := fakeTable(t)
	failOn(f, "PutItem", 0, serverError())
	if err := admin.CreateTable(context.Background(), f, "t"); !errors.Is(err, dynamo.ErrUnavailable) {
		t.Errorf("CreateTable() with PutItem failing = %v, want ErrUnavailable", err)
	}
	f.SetFail(nil)
	item := map[string]types.AttributeValue{}
	for _, it := range f.Items("t") {
		if _, ok := it["schema"]; ok {
			item = it
		}
	}
	if len(item) == 0 {
		t.Fatal("no schema version record")
	}
	item["schema"] = &types.AttributeValueMemberS{Value: "0-older"}
	if _, err := f.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String("t"), Item: item}); err != nil {
		t.Fatal(err)
	}
	if err := admin.CreateTable(context.Background(), f, "t"); !errors.Is(err, dynamo.ErrSchema) {
		t.Errorf("CreateTable() over another schema version = %v, want ErrSchema", err)
	}
}
