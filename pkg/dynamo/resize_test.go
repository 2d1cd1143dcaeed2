package dynamo_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/admin"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// slowLimit is a limit of capacity tokens that refills one millitoken a
// day: what a bucket holds stays put while a test runs.
func slowLimit(t *testing.T, capacity tokenbucket.Millitokens) tokenbucket.Limit {
	t.Helper()
	l, err := tokenbucket.NewLimit(capacity*tokenbucket.PerToken, 1, 24*time.Hour)
	if err != nil {
		t.Fatalf("NewLimit() = %v", err)
	}
	return l
}

// shardCounts returns the shard_count of every bucket item of f, by key.
func shardCounts(f *dynamotest.Fake) map[string]string {
	out := map[string]string{}
	for _, it := range bucketItems(f) {
		pk, _ := it["PK"].(*types.AttributeValueMemberS)
		c, _ := it["shard_count"].(*types.AttributeValueMemberN)
		if pk != nil && c != nil {
			out[pk.Value] = c.Value
		}
	}
	return out
}

// admitConcurrently runs goroutines callers, in turn on each of stores,
// each deciding p each times, and returns how many were admitted.
func admitConcurrently(t *testing.T, stores []*dynamo.Store, goroutines, each int, p *cascade.Plan) int {
	t.Helper()
	var mu sync.Mutex
	admitted := 0
	var wg sync.WaitGroup
	for i := range goroutines {
		s := stores[i%len(stores)]
		wg.Go(func() {
			for k := range each {
				dec, err := s.Acquire(context.Background(), p)
				if err != nil {
					t.Errorf("Acquire() #%d = %v", k, err)
					return
				}
				if dec.Admitted {
					mu.Lock()
					admitted++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return admitted
}

// driveRate has two replicas on one table write one bucket from 1 shard,
// each past Config.ShardWriteRate (100 writes per window, the clock
// standing still) but short of twice it, concurrently: each may start a
// doubling from 1, and the bucket doubles once. Decisions stay exact: never
// more admitted than the capacity.
func driveRate(t *testing.T, api dynamo.API, table string) (doublings int64, shards int) {
	t.Helper()
	c := newClock()
	cfg := dynamo.Config{Table: table, Timeout: 5 * time.Second, RejectionCacheSize: dynamo.RejectionCacheOff, ShardWriteRate: 100, ShardMergeRate: -1}
	obs := []*countingObserver{{}, {}}
	stores := []*dynamo.Store{newStoreCfg(t, api, cfg, c, dynamo.WithObserver(obs[0])), newStoreCfg(t, api, cfg, c, dynamo.WithObserver(obs[1]))}
	lim := slowLimit(t, 1000)
	key := cascade.Key{Entity: "hot", Resource: "r"}
	p := &cascade.Plan{Debits: []cascade.Debit{{Key: key, Limit: "rps", Bucket: lim, Amount: tokenbucket.PerToken}}}
	admitted := admitConcurrently(t, stores, 2, 150, p)
	// A doubling runs beside the decisions, under the store's life: Close
	// would cancel one that has not landed yet (on a loaded machine it can
	// still be under way when the last decision is made).
	for deadline := time.Now().Add(5 * time.Second); obs[0].doublings.Load()+obs[1].doublings.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	for _, s := range stores {
		_ = s.Close() // waits for a doubling under way
	}
	if admitted > 1000 {
		t.Errorf("admitted %d of 300 on a bucket of 1 000 tokens, want at most 1 000", admitted)
	}
	if admitted < 100 {
		t.Errorf("admitted %d of 300 on a bucket of 1 000 tokens, want at least the 100 before a doubling", admitted)
	}
	st, err := admin.New(newStoreCfg(t, api, cfg, c)).Bucket(context.Background(), key, map[string]tokenbucket.Limit{"rps": lim})
	if err != nil {
		t.Fatalf("Bucket() = %v", err)
	}
	return obs[0].doublings.Load() + obs[1].doublings.Load(), st.ShardCount
}

// TestDoublingOnRate: two replicas drive a bucket past the write rate at
// once; it is doubled once, before any throttling, not twice.
func TestDoublingOnRate(t *testing.T) {
	for range 3 {
		n, shards := driveRate(t, fakeTable(t), "t")
		if n != 1 || shards != 2 {
			t.Errorf("two replicas past ShardWriteRate: %d doublings, %d shards, want 1 doubling to 2 shards", n, shards)
		}
	}
}

// TestConcurrentDoublingOnce: replicas that double the same bucket from
// the same count at once double it once: the transaction is conditional on
// the old count.
func TestConcurrentDoublingOnce(t *testing.T) {
	for range 10 {
		f := fakeTable(t)
		c := newClock()
		key := cascade.Key{Entity: "hot", Resource: "r"}
		lim := slowLimit(t, 1000)
		var obs [4]countingObserver
		var stores []*dynamo.Store
		for i := range obs {
			stores = append(stores, newStoreCfg(t, f, dynamo.Config{Table: "t", Timeout: time.Second}, c, dynamo.WithObserver(&obs[i])))
		}
		if err := admin.New(stores[0]).SetShards(context.Background(), key, 2, map[string]tokenbucket.Limit{"rps": lim}); err != nil {
			t.Fatalf("SetShards(2) = %v", err)
		}
		start := make(chan struct{})
		var wg sync.WaitGroup
		for _, s := range stores {
			wg.Go(func() {
				<-start
				if err := s.DoubleShards(context.Background(), key, 2); err != nil {
					t.Errorf("DoubleShards(2) = %v", err)
				}
			})
		}
		close(start)
		wg.Wait()
		var n int64
		for i := range obs {
			n += obs[i].doublings.Load()
		}
		if n != 1 {
			t.Errorf("4 replicas doubling from 2 at once: %d doublings, want 1", n)
		}
		for pk, c := range shardCounts(f) {
			if c != "4" {
				t.Errorf("item %s shard_count = %s, want 4", pk, c)
			}
		}
	}
}

// TestMergeConservesTokens merges a bucket of 4 shards, each holding a
// different share, to 2, then to 1: what the bucket holds is the same to
// the millitoken before and after each merge. A replica that still writes
// to a removed shard is refused by its condition, learns the count, and
// decides on a shard that counts: every debit lands exactly once. A
// doubling then brings a removed shard back.
func TestMergeConservesTokens(t *testing.T) {
	f := fakeTable(t)
	s, key := mergeConserves(t, f, "t")
	if err := s.DoubleShards(context.Background(), key, 1); err != nil {
		t.Fatalf("DoubleShards(1) over a merged shard = %v", err)
	}
	if got := shardCounts(f)[bucketPK(key, 1)]; got != "2" {
		t.Errorf("doubling from 1 after merges: shard 1 shard_count = %s, want 2 (brought back)", got)
	}
}

// mergeConserves runs TestMergeConservesTokens on api's table and returns
// the store that merged and the bucket's key.
func mergeConserves(t *testing.T, api dynamo.API, table string) (*dynamo.Store, cascade.Key) {
	t.Helper()
	c := newClock()
	obs := &countingObserver{}
	cfg := dynamo.Config{Table: table, Timeout: 5 * time.Second, RejectionCacheSize: dynamo.RejectionCacheOff, ShardWriteRate: -1, ShardMergeRate: 10}
	s := newStoreCfg(t, api, cfg, c, dynamo.WithObserver(obs))
	stale := newStoreCfg(t, api, cfg, c)
	lim := slowLimit(t, 1000)
	limits := map[string]tokenbucket.Limit{"rps": lim}
	key := cascade.Key{Entity: "e", Resource: "r"}
	if err := admin.New(s).SetShards(context.Background(), key, 4, limits); err != nil {
		t.Fatalf("SetShards(4) = %v", err)
	}
	for i := range 40 { // uneven shares, and the stale replica learns 4 shards
		amount := tokenbucket.Millitokens(i%7+1) * 333
		p := &cascade.Plan{Debits: []cascade.Debit{{Key: key, Limit: "rps", Bucket: lim, Amount: amount}}}
		if _, err := []*dynamo.Store{s, stale}[i%2].Acquire(context.Background(), p); err != nil {
			t.Fatalf("Acquire() = %v", err)
		}
	}
	c.Advance(time.Second) // idle: the shards' last writes are far apart
	bucket := func() admin.BucketState {
		st, err := admin.New(s).Bucket(context.Background(), key, limits)
		if err != nil {
			t.Fatalf("Bucket() = %v", err)
		}
		return st
	}
	for _, n := range []int{4, 2} {
		before := bucket().Total()["rps"].Tokens
		if err := s.MergeShards(context.Background(), key, n); err != nil {
			t.Fatalf("MergeShards(%d) = %v", n, err)
		}
		st := bucket()
		if after := st.Total()["rps"].Tokens; after != before {
			t.Errorf("merge from %d shards: bucket holds %d, want %d as before", n, after, before)
		}
		if st.ShardCount != n/2 {
			t.Errorf("merge from %d shards: shard count %d, want %d", n, st.ShardCount, n/2)
		}
	}
	if got := obs.merges.Load(); got != 2 {
		t.Errorf("ShardMerged calls = %d, want 2", got)
	}
	before := bucket().Total()["rps"].Tokens
	p := &cascade.Plan{Debits: []cascade.Debit{{Key: key, Limit: "rps", Bucket: lim, Amount: tokenbucket.PerToken}}}
	for i := range 20 {
		dec, err := stale.Acquire(context.Background(), p)
		if err != nil || !dec.Admitted {
			t.Fatalf("stale replica Acquire() #%d = %+v, %v, want admitted", i, dec, err)
		}
	}
	if after := bucket().Total()["rps"].Tokens; after != before-20*tokenbucket.PerToken {
		t.Errorf("after 20 tokens taken by a replica that knew 4 shards: bucket holds %d, want %d", after, before-20*tokenbucket.PerToken)
	}
	return s, key
}

// TestShardingLocal runs the doubling and the merge against DynamoDB
// Local: two replicas past the write rate double the bucket once, and
// merges conserve its tokens to the millitoken.
func TestShardingLocal(t *testing.T) {
	l := dynamotest.Shared(t)
	api := l.Client(t)
	name := dynamotest.TableName(t)
	l.CreateTable(context.Background(), t, name)
	if n, shards := driveRate(t, api, name); n != 1 || shards != 2 {
		t.Errorf("two replicas past ShardWriteRate: %d doublings, %d shards, want 1 doubling to 2 shards", n, shards)
	}
	mergeConserves(t, api, name)
}

// bucketPK is the partition key of a shard of key's bucket in the default
// namespace (docs/dynamodb.md).
func bucketPK(key cascade.Key, shard int) string {
	return "n" + dynamo.DefaultNamespace + "/BUCKET#" + key.Entity + "#" + key.Resource + "#" + strconv.Itoa(shard)
}

// TestMergeWhenIdle: a sharded bucket whose writes stayed below
// ShardMergeRate for ShardMergeAfter is halved by the next write (no
// write follows while it merges: one would cancel it).
func TestMergeWhenIdle(t *testing.T) {
	f := fakeTable(t)
	c := newClock()
	obs := &countingObserver{}
	s := newStoreCfg(t, f, dynamo.Config{Table: "t", Timeout: time.Second, ShardMergeRate: 10, ShardMergeAfter: time.Minute}, c, dynamo.WithObserver(obs))
	lim := slowLimit(t, 1000)
	key := cascade.Key{Entity: "e", Resource: "r"}
	if err := admin.New(s).SetShards(context.Background(), key, 2, map[string]tokenbucket.Limit{"rps": lim}); err != nil {
		t.Fatalf("SetShards(2) = %v", err)
	}
	p := &cascade.Plan{Debits: []cascade.Debit{{Key: key, Limit: "rps", Bucket: lim, Amount: tokenbucket.PerToken}}}
	for i := range 2 { // the second write, a calm minute later, starts the merge
		if i > 0 {
			c.Advance(time.Minute)
		}
		if _, err := s.Acquire(context.Background(), p); err != nil {
			t.Fatalf("Acquire() = %v", err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for obs.merges.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if got := obs.merges.Load(); got != 1 {
		t.Fatalf("ShardMerged calls after an idle minute = %d, want 1", got)
	}
	if got := shardCounts(f)[bucketPK(key, 0)]; got != "1" {
		t.Errorf("shard 0 shard_count after the merge = %s, want 1", got)
	}
}

// TestDrainAfterMerge: replicas that knew 4 shards drain a bucket merged
// to 1, concurrently: every admission is a token the bucket held, none
// more, and what is left is exactly what was not admitted.
func TestDrainAfterMerge(t *testing.T) {
	f := fakeTable(t)
	c := newClock()
	cfg := dynamo.Config{Table: "t", Timeout: 5 * time.Second, RejectionCacheSize: dynamo.RejectionCacheOff, ShardWriteRate: -1, ShardMergeRate: 10}
	stores := []*dynamo.Store{newStoreCfg(t, f, cfg, c), newStoreCfg(t, f, cfg, c), newStoreCfg(t, f, cfg, c)}
	lim := slowLimit(t, 100)
	limits := map[string]tokenbucket.Limit{"rps": lim}
	key := cascade.Key{Entity: "e", Resource: "r"}
	if err := admin.New(stores[0]).SetShards(context.Background(), key, 4, limits); err != nil {
		t.Fatalf("SetShards(4) = %v", err)
	}
	p := &cascade.Plan{Debits: []cascade.Debit{{Key: key, Limit: "rps", Bucket: lim, Amount: tokenbucket.PerToken}}}
	for i := range 12 { // each replica learns 4 shards
		if _, err := stores[i%3].Acquire(context.Background(), p); err != nil {
			t.Fatalf("Acquire() = %v", err)
		}
	}
	c.Advance(time.Second)
	for _, n := range []int{4, 2} {
		if err := stores[0].MergeShards(context.Background(), key, n); err != nil {
			t.Fatalf("MergeShards(%d) = %v", n, err)
		}
	}
	st, err := admin.New(stores[0]).Bucket(context.Background(), key, limits)
	if err != nil || st.ShardCount != 1 {
		t.Fatalf("Bucket() after merging to 1 = %+v, %v, want 1 shard", st, err)
	}
	before := st.Total()["rps"].Tokens
	admitted := admitConcurrently(t, stores, 6, 40, p)
	st, err = admin.New(stores[0]).Bucket(context.Background(), key, limits)
	if err != nil {
		t.Fatalf("Bucket() = %v", err)
	}
	if after := st.Total()["rps"].Tokens; after != before-tokenbucket.Millitokens(admitted)*tokenbucket.PerToken || after < 0 {
		t.Errorf("%d admitted from a bucket holding %d: it holds %d, want %d and never below 0", admitted, before, after, before-tokenbucket.Millitokens(admitted)*tokenbucket.PerToken)
	}
	if want := int(before / tokenbucket.PerToken); admitted != want {
		t.Errorf("admitted %d of 240 from a bucket holding %d whole tokens, want %d", admitted, before, want)
	}
}

// TestDoubledShardsRefill: the shards a doubling creates start empty when
// it creates them and refill from then on, whether or not a decision has
// written them: a drained bucket of 100 a second on two shards admits 100
// again a second later. (A new shard that started empty again at every
// decision, and was written only by an admission, never filled: the
// bucket then admitted its old shard's half of the refill, and a fleet
// whose hot bucket doubled to 32 shards a fiftieth of its limit.)
func TestDoubledShardsRefill(t *testing.T) {
	f := fakeTable(t)
	c := newClock()
	obs := &countingObserver{}
	cfg := dynamo.Config{Table: "t", Timeout: 5 * time.Second, RejectionCacheSize: dynamo.RejectionCacheOff, ShardWriteRate: 50, ShardMergeRate: -1}
	s := newStoreCfg(t, f, cfg, c, dynamo.WithObserver(obs))
	lim, err := tokenbucket.NewLimit(100*tokenbucket.PerToken, 100*tokenbucket.PerToken, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	key := cascade.Key{Entity: "hot", Resource: "r"}
	p := &cascade.Plan{Debits: []cascade.Debit{{Key: key, Limit: "rps", Bucket: lim, Amount: tokenbucket.PerToken}}}
	decide := func(n int) int { return decideN(t, s, p, n) }
	// Past ShardWriteRate with the clock standing still: the bucket
	// doubles beside the decisions (the new shard holds nothing: the old
	// one's tokens were handed out); drain what is left of it.
	if got := decide(100); got > 100 || got < 50 {
		t.Fatalf("a full bucket of 100 admitted %d of 100", got)
	}
	for deadline := time.Now().Add(5 * time.Second); obs.doublings.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if obs.doublings.Load() != 1 {
		t.Fatalf("%d doublings past ShardWriteRate, want 1", obs.doublings.Load())
	}
	if got := decide(50); got != 0 {
		t.Fatalf("a drained bucket admitted %d", got)
	}
	// A second later each shard has refilled its half of 100.
	c.Advance(time.Second)
	if got := decide(300); got != 100 {
		t.Errorf("a second after the doubling the bucket admitted %d, want 100 (both shards refilled their halves)", got)
	}
}
