package dynamo_test

import (
	"context"
	"maps"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/admin"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

type countingObserver struct {
	doublings, hits, contended, writes, batched atomic.Int64
	merges                                      atomic.Int64
	parentWrites                                atomic.Int64 // writes whose least debit depth was ≥ 1
	behind                                      atomic.Int64 // the last ClockBehind, in ns
	pending                                     atomic.Int64 // the last GiveBacksPending

	mu       sync.Mutex
	gaveBack map[string]int // GaveBack results
}

func (o *countingObserver) ShardDoubled()      { o.doublings.Add(1) }
func (o *countingObserver) ShardMerged()       { o.merges.Add(1) }
func (o *countingObserver) RejectionCacheHit() { o.hits.Add(1) }
func (o *countingObserver) Contended(string)   { o.contended.Add(1) }
func (o *countingObserver) Batched(n, depth int) {
	o.writes.Add(1)
	o.batched.Add(int64(n))
	if depth > 0 {
		o.parentWrites.Add(1)
	}
}

func (o *countingObserver) ClockBehind(d time.Duration) { o.behind.Store(int64(d)) }
func (o *countingObserver) GaveBack(result string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.gaveBack == nil {
		o.gaveBack = map[string]int{}
	}
	o.gaveBack[result]++
}
func (o *countingObserver) GiveBacksPending(n int) { o.pending.Store(int64(n)) }

// givenBack returns how many give-backs ended with each result.
func (o *countingObserver) givenBack() map[string]int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return maps.Clone(o.gaveBack)
}

// throttleWrites makes f throttle its first n UpdateItem calls.
func throttleWrites(f *dynamotest.Fake, n int64) {
	var seen atomic.Int64
	f.SetFail(func(_ context.Context, op string) error {
		if op == "UpdateItem" && seen.Add(1) <= n {
			return throttled()
		}
		return nil
	})
}

// TestShardDoubling has DynamoDB throttle writes of one hot item: the store
// retries within its budget, doubles the shard count once per batch, and
// the sharded bucket then admits exactly its capacity, no more.
func TestShardDoubling(t *testing.T) {
	f := dynamotest.NewFake()
	if err := admin.CreateTable(context.Background(), f, "t"); err != nil {
		t.Fatalf("CreateTable() = %v", err)
	}
	obs := &countingObserver{}
	c := newClock()
	s := newStoreCfg(t, f, dynamo.Config{Table: "t", Timeout: time.Second, RejectionCacheSize: dynamo.RejectionCacheOff}, c, dynamo.WithObserver(obs))
	lim, err := tokenbucket.NewLimit(1200*tokenbucket.PerToken, 1, 24*time.Hour) // no refill to speak of
	if err != nil {
		t.Fatalf("NewLimit() = %v", err)
	}
	key := cascade.Key{Entity: "hot", Resource: "r"}
	p := &cascade.Plan{Debits: []cascade.Debit{{Key: key, Limit: "rpm", Bucket: lim, Amount: tokenbucket.PerToken}}}
	if _, err := s.Acquire(context.Background(), p); err != nil { // the item exists, unsharded
		t.Fatalf("Acquire() = %v", err)
	}
	throttleWrites(f, 3)
	admitted := 1
	for i := 1; i < 1300; i++ {
		dec, err := s.Acquire(context.Background(), p)
		if err != nil {
			t.Fatalf("Acquire() #%d = %v", i, err)
		}
		if dec.Admitted {
			admitted++
		}
	}
	if n := obs.doublings.Load(); n < 1 || n > 2 {
		t.Errorf("ShardDoubled calls = %d after three throttled writes, want 1 or 2", n)
	}
	// The first doubling halves the share of the remaining tokens (shard 0
	// keeps its level, in whole-bucket units, and now holds half of it; the
	// new shard starts empty): conservative, never more than the capacity.
	if admitted > 1200 {
		t.Errorf("admitted %d of 1 300, want at most the capacity 1 200", admitted)
	}
	if admitted < 600 {
		t.Errorf("admitted %d of 1 300, want at least half the capacity (600)", admitted)
	}
	// Every other replica learns the count from any shard it touches.
	other := newStoreCfg(t, f, dynamo.Config{Table: "t", Timeout: time.Second, RejectionCacheSize: dynamo.RejectionCacheOff}, c)
	st, err := admin.New(other).Status(context.Background(), key, map[string]tokenbucket.Limit{"rpm": lim})
	if err != nil {
		t.Fatalf("Status() = %v", err)
	}
	if st["rpm"].Remaining > 2*tokenbucket.PerToken {
		t.Errorf("Status().Remaining = %d after the bucket was drained, want about 0", st["rpm"].Remaining)
	}
}

// TestThrottledRefuses throttles every write: after retrying within its
// budget, the decision is a refusal for contention, never an error that
// ON_UNAVAILABLE could turn into an admission.
func TestThrottledRefuses(t *testing.T) {
	f := dynamotest.NewFake()
	if err := admin.CreateTable(context.Background(), f, "t"); err != nil {
		t.Fatalf("CreateTable() = %v", err)
	}
	obs := &countingObserver{}
	// A budget of several backoffs: with 30 ms, under -race on a busy
	// machine, the deadline could pass between a backoff's end and the
	// next write, which then fails as unavailable (its outcome unknown)
	// instead of the refusal this test is about.
	s := newStoreCfg(t, f, dynamo.Config{Table: "t", Timeout: 500 * time.Millisecond, RejectionCacheSize: dynamo.RejectionCacheOff}, newClock(), dynamo.WithObserver(obs))
	f.SetFail(func(_ context.Context, op string) error {
		if op == "UpdateItem" || op == "TransactWriteItems" {
			return throttled()
		}
		return nil
	})
	lim := mustLimit(t, 10, time.Second, 0)
	p := &cascade.Plan{Debits: []cascade.Debit{{Key: cascade.Key{Entity: "e", Resource: "r"}, Limit: "rps", Bucket: lim, Amount: tokenbucket.PerToken}}}
	dec, err := s.Acquire(context.Background(), p)
	if err != nil {
		t.Fatalf("Acquire() with every write throttled = %v, want a refusal", err)
	}
	if dec.Admitted || dec.Statuses[0].RetryAfter <= 0 {
		t.Errorf("Acquire() with every write throttled = %+v, want refused with a retry-after", dec)
	}
	if obs.contended.Load() != 1 {
		t.Errorf("Contended() calls = %d, want 1", obs.contended.Load())
	}
}

// TestDoublingFromTwoShards: a bucket pre-sharded into two doubles to four
// (and on to eight if throttled again): every shard of the new count exists
// and says so, and the log names the new count.
//
// Equivalent mutant, read by internal/mutants (make mutation):
//
// mutant: ARITHMETIC_BASE double.go `b.base, 2*n` learnShards after double: the batch reads its item again at once (img = nil), and keeping that image teaches the cache shard_count 2n; only a batch racing in between would pick among n shards.
func TestDoublingFromTwoShards(t *testing.T) {
	f := dynamotest.NewFake()
	if err := admin.CreateTable(context.Background(), f, "t"); err != nil {
		t.Fatalf("CreateTable() = %v", err)
	}
	obs := &countingObserver{}
	logger, logs := logtest.NewNullLogger()
	s := newStoreCfg(t, f, dynamo.Config{Table: "t", Timeout: time.Second, RejectionCacheSize: dynamo.RejectionCacheOff}, newClock(),
		dynamo.WithObserver(obs), dynamo.WithLogger(logrus.NewEntry(logger)))
	lim := mustLimit(t, 1000, time.Second, 0)
	key := cascade.Key{Entity: "hot", Resource: "r"}
	if err := admin.New(s).SetShards(context.Background(), key, 2, map[string]tokenbucket.Limit{"rps": lim}); err != nil {
		t.Fatalf("SetShards(2) = %v", err)
	}
	throttleWrites(f, 3)
	p := &cascade.Plan{Debits: []cascade.Debit{{Key: key, Limit: "rps", Bucket: lim, Amount: tokenbucket.PerToken}}}
	for i := range 20 {
		if _, err := s.Acquire(context.Background(), p); err != nil {
			t.Fatalf("Acquire() #%d = %v", i, err)
		}
	}
	n := obs.doublings.Load()
	if n < 1 {
		t.Fatalf("ShardDoubled calls = %d after three throttled writes, want at least 1", n)
	}
	want := 2 << n
	items := bucketItems(f)
	if len(items) != want {
		t.Errorf("bucket items after %d doublings from 2 shards = %d, want %d", n, len(items), want)
	}
	for _, it := range items {
		if c, _ := it["shard_count"].(*types.AttributeValueMemberN); c == nil || c.Value != strconv.Itoa(want) {
			t.Errorf("after %d doublings from 2 shards, item %v shard_count = %#v, want %d", n, it["PK"], it["shard_count"], want)
		}
	}
	count := 2
	for _, e := range logs.AllEntries() {
		if e.Message != "doubled the shard count of a hot bucket" {
			continue
		}
		count *= 2
		if got := e.Data["shards"]; got != count {
			t.Errorf("log of a doubling to %d shards: shards = %v, want %d", count, got, count)
		}
	}
	if count != want {
		t.Errorf("logged doublings reach %d shards, want %d", count, want)
	}
}

// TestThrottledDoublingOnePerWindow: DynamoDB throttles every write of the
// four shards of a bucket, so that no doubling can move them. A replica
// tries one doubling, not one per throttled batch: each try writes every
// shard, the throttled ones too, and a try per batch only throttled more
// (a fleet's hot bucket stayed at 8 shards under throttling in the
// simulation). It tries again once a second has passed. A try writes the
// first new shard (pending) once, so those writes count the tries.
func TestThrottledDoublingOnePerWindow(t *testing.T) {
	f := dynamotest.NewFake()
	if err := admin.CreateTable(context.Background(), f, "t"); err != nil {
		t.Fatalf("CreateTable() = %v", err)
	}
	c := newClock()
	s := newStoreCfg(t, f, dynamo.Config{Table: "t", Timeout: 20 * time.Millisecond, RejectionCacheSize: dynamo.RejectionCacheOff, ShardWriteRate: -1}, c)
	key := cascade.Key{Entity: "hot", Resource: "r"}
	lim := mustLimit(t, 1000, time.Second, 0)
	if err := admin.New(s).SetShards(context.Background(), key, 4, map[string]tokenbucket.Limit{"rps": lim}); err != nil {
		t.Fatalf("SetShards(4) = %v", err)
	}
	var tries atomic.Int64
	f.SetFailItem(func(op, pk string) error {
		if op != "UpdateItem" {
			return nil
		}
		switch pk[len(pk)-2:] {
		case "#0", "#1", "#2", "#3":
			return throttled()
		case "#4":
			tries.Add(1)
		}
		return nil
	})
	p := &cascade.Plan{Debits: []cascade.Debit{{Key: key, Limit: "rps", Bucket: lim, Amount: tokenbucket.PerToken}}}
	for i := range 20 {
		if _, err := s.Acquire(context.Background(), p); err != nil {
			t.Fatalf("Acquire() #%d = %v", i, err)
		}
	}
	if n := tries.Load(); n != 1 {
		t.Errorf("doublings tried over 20 throttled decisions within a second = %d, want 1", n)
	}
	c.Advance(time.Second)
	if _, err := s.Acquire(context.Background(), p); err != nil {
		t.Fatalf("Acquire() a second later = %v", err)
	}
	if n := tries.Load(); n != 2 {
		t.Errorf("doublings tried after a second more = %d, want 2", n)
	}
}
