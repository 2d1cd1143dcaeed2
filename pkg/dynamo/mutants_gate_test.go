package dynamo_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// TestGateWindowEdges: a chain is decided at its tenant first until
// exactly gateWindow (1 s) past the tenant's last refusal's retry-after,
// not at that instant. Another replica empties the tenant before each
// chain, so the tenant refuses it: gated, the key's item is never written;
// not gated, it is written and given back.
func TestGateWindowEdges(t *testing.T) {
	f := fakeTable(t)
	c := newClock()
	s := newStoreCfg(t, f, dynamo.Config{Table: "t", Timeout: time.Second}, c)
	other := newStore(t, f, "t", c) // no rejection cache
	tenant := mustLimit(t, 2, time.Second, 0)
	own := mustLimit(t, 100, time.Second, 0)
	tenantKey := cascade.Key{Entity: "acme", Resource: "r"}
	chain := func(key string) *cascade.Plan {
		return &cascade.Plan{Debits: []cascade.Debit{
			{Key: cascade.Key{Entity: key, Resource: "r"}, Limit: "rps", Bucket: own, Amount: tokenbucket.PerToken},
			{Key: tenantKey, Limit: "rps", Bucket: tenant, Amount: tokenbucket.PerToken, Depth: 1},
		}}
	}
	drain := func() {
		t.Helper()
		dec, err := other.Acquire(context.Background(), &cascade.Plan{Debits: []cascade.Debit{
			{Key: tenantKey, Limit: "rps", Bucket: tenant, Amount: 2 * tokenbucket.PerToken},
		}})
		if err != nil || !dec.Admitted {
			t.Fatalf("the other replica's drain of the tenant = %+v, %v, want admitted", dec, err)
		}
	}
	refused := func(key string) {
		t.Helper()
		dec, err := s.Acquire(context.Background(), chain(key))
		if err != nil || dec.Admitted || dec.Statuses[1].OK {
			t.Fatalf("Acquire(%s) = %+v, %v, want refused by the tenant", key, dec, err)
		}
	}
	written := func(key string) bool {
		for _, it := range f.Items("t") {
			if e, ok := it["entity"].(*types.AttributeValueMemberS); ok && e.Value == key {
				return true
			}
		}
		return false
	}
	// T0: the tenant empty, k0 refused (retry-after 500 ms: gated until
	// T0+1500 ms).
	drain()
	refused("k0")
	c.Advance(1500 * time.Millisecond) // exactly at the window's end
	drain()
	refused("k1")
	if !written("k1") {
		t.Errorf("k1, asked exactly gateWindow past the tenant's retry-after, was not written: want the chain not gated")
	}
	// k1's refusal: retry-after 500 ms, gated until T0+3000 ms.
	c.Advance(1499 * time.Millisecond) // a millisecond before the window's end
	drain()
	refused("k2")
	if written("k2") {
		t.Errorf("k2, asked within gateWindow of the tenant's retry-after, was written: want the chain decided at the tenant first")
	}
}
