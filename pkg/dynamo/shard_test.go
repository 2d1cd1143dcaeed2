package dynamo_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

type countingObserver struct{ doublings, hits atomic.Int64 }

func (o *countingObserver) ShardDoubled()      { o.doublings.Add(1) }
func (o *countingObserver) RejectionCacheHit() { o.hits.Add(1) }

// TestShardDoubling writes one bucket faster than its hidden wcu limit
// allows (a frozen clock: 10 000 writes in one millisecond), wants the
// shard count doubled, and, once time moves on, the sharded bucket to admit
// exactly its capacity, no more.
func TestShardDoubling(t *testing.T) {
	f := dynamotest.NewFake()
	if err := dynamo.CreateTable(context.Background(), f, "t"); err != nil {
		t.Fatalf("CreateTable() = %v", err)
	}
	obs := &countingObserver{}
	c := newClock()
	s := newStoreCfg(t, f, dynamo.Config{Table: "t", Timeout: time.Second}, c, dynamo.WithObserver(obs))
	lim, err := tokenbucket.NewLimit(12000*tokenbucket.PerToken, 1, 24*time.Hour) // no refill to speak of
	if err != nil {
		t.Fatalf("NewLimit() = %v", err)
	}
	key := cascade.Key{Entity: "hot", Resource: "r"}
	p := &cascade.Plan{Debits: []cascade.Debit{{Key: key, Limit: "rpm", Bucket: lim, Amount: tokenbucket.PerToken}}}
	admitted := 0
	advanced := false
	for i := 0; i < 13000; i++ {
		if !advanced && obs.doublings.Load() > 0 {
			c.Advance(10 * time.Second) // wcu refills; the bucket gains nothing
			advanced = true
		}
		dec, err := s.Acquire(context.Background(), p)
		if err != nil {
			t.Fatalf("Acquire() #%d = %v", i, err)
		}
		if dec.Admitted {
			admitted++
		}
	}
	if n := obs.doublings.Load(); n != 1 {
		t.Errorf("ShardDoubled calls = %d after 10 000 writes in one millisecond, want 1", n)
	}
	if admitted != 12000 {
		t.Errorf("admitted %d of 13 000, want exactly the capacity 12 000", admitted)
	}
	// Every other replica learns the count from any shard it touches.
	other := newStoreCfg(t, f, dynamo.Config{Table: "t", Timeout: time.Second}, c)
	for range 4 {
		st, err := other.Status(context.Background(), key, map[string]tokenbucket.Limit{"rpm": lim})
		if err != nil || st["rpm"].Remaining != 0 || st["rpm"].OK {
			t.Errorf("Status() = %+v, %v, want 0 remaining", st, err)
		}
	}
}

// TestAdjust debits and refunds a bucket with unconditional ADDs.
func TestAdjust(t *testing.T) {
	api, table := backends()[0].api(t)
	c := newClock()
	s := newStore(t, api, table, c)
	lim := mustLimit(t, 10, time.Hour, 0)
	key := cascade.Key{Entity: "e", Resource: "r"}
	p := &cascade.Plan{Debits: []cascade.Debit{{Key: key, Limit: "tpm", Bucket: lim, Amount: tokenbucket.PerToken}}}
	if _, err := s.Acquire(context.Background(), p); err != nil {
		t.Fatalf("Acquire() = %v", err)
	}
	steps := []struct {
		delta tokenbucket.Millitokens
		want  tokenbucket.Millitokens
	}{
		{4 * tokenbucket.PerToken, 5 * tokenbucket.PerToken},   // cost more than estimated
		{-2 * tokenbucket.PerToken, 7 * tokenbucket.PerToken},  // refund
		{12 * tokenbucket.PerToken, -5 * tokenbucket.PerToken}, // into debt
	}
	for _, st := range steps {
		if err := s.Adjust(context.Background(), key, "tpm", st.delta); err != nil {
			t.Fatalf("Adjust(%d) = %v", st.delta, err)
		}
		got, err := s.Status(context.Background(), key, map[string]tokenbucket.Limit{"tpm": lim})
		if err != nil || got["tpm"].Remaining != st.want {
			t.Errorf("Status() after Adjust(%d) = %+v, %v, want %d remaining", st.delta, got, err, st.want)
		}
	}
	if err := s.Adjust(context.Background(), cascade.Key{Entity: "none", Resource: "r"}, "tpm", 1); err != nil {
		t.Errorf("Adjust(missing bucket) = %v, want nil (nothing to adjust)", err)
	}
}
