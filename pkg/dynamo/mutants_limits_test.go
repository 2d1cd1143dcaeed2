package dynamo_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// TestLimitsWritesFailClosed: SetLimits whose read of the limits stored
// fails writes nothing (it would drop what it could not read), and
// DeleteLimits whose delete fails says so.
func TestLimitsWritesFailClosed(t *testing.T) {
	f := fakeTable(t)
	s := newStore(t, f, "t", newClock())
	ctx := context.Background()
	sc := dynamo.Scope{Resource: "r"}
	lim := map[string]tokenbucket.Limit{"rpm": mustLimit(t, 10, time.Minute, 0)}
	if err := s.SetLimits(ctx, sc, lim); err != nil {
		t.Fatal(err)
	}
	fail := func(op string) {
		f.SetFail(func(_ context.Context, o string) error {
			if o == op {
				return serverError()
			}
			return nil
		})
	}
	fail("GetItem")
	puts := f.Calls("PutItem")
	if err := s.SetLimits(ctx, sc, map[string]tokenbucket.Limit{"rps": mustLimit(t, 1, time.Second, 0)}); err == nil || f.Calls("PutItem") != puts {
		t.Errorf("SetLimits with its read failing = %v after %d writes, want an error and none", err, f.Calls("PutItem")-puts)
	}
	fail("DeleteItem")
	if err := s.DeleteLimits(ctx, sc); !errors.Is(err, dynamo.ErrUnavailable) {
		t.Errorf("DeleteLimits with DeleteItem failing = %v, want ErrUnavailable", err)
	}
}

// TestLimitsRecordNamesItsEntity: an entity's limits record carries the
// entity (what the namespace tools find it by); a resource's does not.
func TestLimitsRecordNamesItsEntity(t *testing.T) {
	f := fakeTable(t)
	s := newStore(t, f, "t", newClock())
	lim := map[string]tokenbucket.Limit{"rpm": mustLimit(t, 10, time.Minute, 0)}
	for _, sc := range []dynamo.Scope{{Entity: "acme", Resource: "r"}, {Resource: "q"}} {
		if err := s.SetLimits(context.Background(), sc, lim); err != nil {
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
