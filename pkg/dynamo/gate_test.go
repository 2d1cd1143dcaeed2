package dynamo_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/admin"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// TestRefusingParentGoesFirst: once a tenant refused, a key's chain past
// the refusal's retry-after is decided at the tenant first; refused again,
// the key's item is never written (nor given back), and the answer names
// the tenant. Admitted, the key's item is written after.
func TestRefusingParentGoesFirst(t *testing.T) {
	f := dynamotest.NewFake()
	if err := admin.CreateTable(context.Background(), f, "t"); err != nil {
		t.Fatal(err)
	}
	c := newClock()
	s := newStoreCfg(t, f, dynamo.Config{Table: "t", Timeout: time.Second}, c)
	tenant := mustLimit(t, 2, time.Second, 0) // 2 a second
	own := mustLimit(t, 100, time.Second, 0)
	chain := func(key string) *cascade.Plan {
		return &cascade.Plan{Debits: []cascade.Debit{
			{Key: cascade.Key{Entity: key, Resource: "r"}, Limit: "rps", Bucket: own, Amount: tokenbucket.PerToken},
			{Key: cascade.Key{Entity: "acme", Resource: "r"}, Limit: "rps", Bucket: tenant, Amount: tokenbucket.PerToken, Depth: 1},
		}}
	}
	ask := func(key string) cascade.Decision {
		t.Helper()
		dec, err := s.Acquire(context.Background(), chain(key))
		if err != nil {
			t.Fatalf("Acquire(%s) error = %v", key, err)
		}
		return dec
	}
	ask("k1")
	ask("k2")
	if dec := ask("k3"); dec.Admitted || dec.Statuses[1].OK {
		t.Fatalf("third key = %+v, want refused by the tenant", dec)
	}
	// Past the refusal's retry-after (500 ms), less than a token later.
	c.Advance(600 * time.Millisecond)
	f.ResetCalls()
	for _, k := range []string{"k4", "k5"} {
		dec := ask(k)
		if k == "k4" && !dec.Admitted {
			t.Fatalf("k4 = %+v, want admitted (the tenant refilled a token)", dec)
		}
		if k == "k5" && (dec.Admitted || dec.Statuses[1].OK || !dec.Statuses[0].OK) {
			t.Fatalf("k5 = %+v, want refused by the tenant, its own bucket OK", dec)
		}
	}
	// k4: the tenant's write, then its own item (a cold read and a write);
	// k5: the tenant alone, answered from the rejection cache or one write.
	if got := f.Calls("UpdateItem"); got > 3 {
		t.Errorf("UpdateItem calls for k4 and k5 = %d, want at most 3 (no write of k5's item, no give-back)", got)
	}
	for _, it := range f.Items("t") {
		if e, ok := it["entity"].(*types.AttributeValueMemberS); ok && e.Value == "k5" {
			t.Errorf("k5's item was written: %v", it)
		}
	}
	st, err := admin.New(s).Status(context.Background(), cascade.Key{Entity: "k5", Resource: "r"}, map[string]tokenbucket.Limit{"rps": own})
	if err != nil {
		t.Fatal(err)
	}
	if st["rps"].Remaining != own.Capacity {
		t.Errorf("k5's bucket holds %d, want full %d: a refused chain debits nothing", st["rps"].Remaining, own.Capacity)
	}
}
