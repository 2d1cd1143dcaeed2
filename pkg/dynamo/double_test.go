package dynamo_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/admin"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// pendingShards returns the bucket items of f that a doubling left pending.
func pendingShards(f *dynamotest.Fake) []string {
	var out []string
	for _, it := range bucketItems(f) {
		if _, ok := it["pending"]; ok {
			out = append(out, it["PK"].(*types.AttributeValueMemberS).Value)
		}
	}
	return out
}

// TestDoublingUnderLoad doubles a bucket from 2 to MaxShards while 64
// callers write every shard of it, on the fake with DynamoDB's latencies
// and its transaction conflicts. Each doubling is single-item writes,
// which queue behind the decisions' writes instead of being cancelled by
// them: every one lands within its budget, leaves no shard pending, and
// the bucket (2,000 a second, below what the callers ask) never admits
// more than its capacity and refill.
func TestDoublingUnderLoad(t *testing.T) {
	f := fakeTable(t)
	f.SetOptions(dynamotest.LikeDynamoDB())
	cfg := dynamo.Config{Table: "t", Timeout: time.Second, ShardWriteRate: -1, ShardMergeRate: -1}
	var stores [2]*dynamo.Store // the callers' replica, and another that doubles
	for i := range stores {
		s, err := dynamo.NewStore(context.Background(), f, cfg) // the runtime's clock: a hot bucket's home shards move with it
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		stores[i] = s
	}
	s, doubler := stores[0], stores[1]
	began := time.Now()
	key := cascade.Key{Entity: "hot", Resource: "r"}
	lim := mustLimit(t, 2000, time.Second, 0) // below what the callers ask: the bound binds
	if err := admin.New(s).SetShards(context.Background(), key, 2, map[string]tokenbucket.Limit{"rps": lim}); err != nil {
		t.Fatalf("SetShards(2) = %v", err)
	}
	p := &cascade.Plan{Debits: []cascade.Debit{{Key: key, Limit: "rps", Bucket: lim, Amount: tokenbucket.PerToken}}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var admitted, errs atomic.Int64
	for range 64 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				dec, err := s.Acquire(context.Background(), p)
				switch {
				case err != nil:
					errs.Add(1)
				case dec.Admitted:
					admitted.Add(1)
				}
			}
		})
	}
	time.Sleep(200 * time.Millisecond)
	for n := 2; n < dynamo.MaxShards; n *= 2 {
		start := time.Now()
		if err := doubler.DoubleShards(context.Background(), key, n); err != nil {
			t.Errorf("DoubleShards(%d) under load = %v", n, err)
		}
		before := admitted.Load()
		time.Sleep(100 * time.Millisecond)
		t.Logf("doubled from %d in %v under load; %d admitted in the next 100 ms", n, time.Since(start).Round(time.Millisecond), admitted.Load()-before)
	}
	close(stop)
	wg.Wait()
	counts := shardCounts(f)
	if len(counts) != dynamo.MaxShards {
		t.Errorf("%d shard items after doubling to %d", len(counts), dynamo.MaxShards)
	}
	for pk, n := range counts {
		if n != strconv.Itoa(dynamo.MaxShards) {
			t.Errorf("item %s shard_count = %s, want %d", pk, n, dynamo.MaxShards)
		}
	}
	if p := pendingShards(f); len(p) > 0 {
		t.Errorf("shards still pending after the doublings: %v", p)
	}
	if errs.Load() != 0 {
		t.Errorf("%d decisions failed", errs.Load())
	}
	if bound := 2000 * (1 + time.Since(began).Seconds()); float64(admitted.Load()) > bound {
		t.Errorf("admitted %d, more than the capacity and refill %.0f", admitted.Load(), bound)
	}
	t.Logf("%d decisions admitted", admitted.Load())
}

// TestDoublingStoppedHalfWay stops a doubling of a bucket of 2 shards
// after it moved shard 0 but not shard 1 (DynamoDB throttles shard 1
// until the budget ends): the new shards stay pending and hold nothing,
// so over 3 s the bucket admits at most its capacity and refill, no more
// (shard 0 holds a quarter, shard 1 half). A decision that meets a
// pending shard after pendingGrace finishes the doubling; then every
// shard says 4, none is pending, and the drained bucket refills its whole
// rate.
func TestDoublingStoppedHalfWay(t *testing.T) {
	f := fakeTable(t)
	c := newClock()
	cfg := dynamo.Config{Table: "t", Timeout: time.Second, RejectionCacheSize: dynamo.RejectionCacheOff, ShardWriteRate: -1, ShardMergeRate: -1}
	s := newStoreCfg(t, f, cfg, c)
	key := cascade.Key{Entity: "hot", Resource: "r"}
	lim := mustLimit(t, 100, time.Second, 0)
	if err := admin.New(s).SetShards(context.Background(), key, 2, map[string]tokenbucket.Limit{"rps": lim}); err != nil {
		t.Fatalf("SetShards(2) = %v", err)
	}
	var block atomic.Bool
	block.Store(true)
	f.SetFailItem(func(op, pk string) error {
		if op == "UpdateItem" && block.Load() && strings.HasSuffix(pk, "#1") {
			return throttled()
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	err := s.DoubleShards(ctx, key, 2)
	cancel()
	block.Store(false)
	if err == nil {
		t.Fatal("DoubleShards(2) with shard 1 throttled throughout = nil, want the throttling")
	}
	if got := shardCounts(f); len(got) != 4 || shardCount(got, 0) != "4" || shardCount(got, 1) != "2" {
		t.Fatalf("shard counts after the stopped doubling = %v, want shard 0 at 4, shard 1 at 2, shards 2 and 3 pending", got)
	}
	if p := pendingShards(f); len(p) != 2 {
		t.Fatalf("pending shards = %v, want shards 2 and 3", p)
	}
	p := &cascade.Plan{Debits: []cascade.Debit{{Key: key, Limit: "rps", Bucket: lim, Amount: tokenbucket.PerToken}}}
	decide := func(n int) int { return decideN(t, s, p, n) }
	// Half-way: at most the capacity and the refill, whichever shard a
	// decision picks.
	var admitted int
	for range 30 {
		admitted += decide(100)
		c.Advance(100 * time.Millisecond)
	}
	if bound := 100 + 100*3; admitted > bound {
		t.Errorf("admitted %d over 3 s half-way through a doubling, more than the bound %d", admitted, bound)
	}
	if p := pendingShards(f); len(p) != 2 {
		t.Fatalf("pending shards within pendingGrace = %v, want both left to their doubling", p)
	}
	// Past pendingGrace the next decision that meets a pending shard
	// finishes the doubling.
	c.Advance(6 * time.Second)
	for deadline := time.Now().Add(5 * time.Second); len(pendingShards(f)) > 0 && time.Now().Before(deadline); {
		decide(10)
		time.Sleep(10 * time.Millisecond)
	}
	if p := pendingShards(f); len(p) > 0 {
		t.Fatalf("pending shards after a decision met them past pendingGrace = %v, want none", p)
	}
	for pk, n := range shardCounts(f) {
		if n != "4" {
			t.Errorf("item %s shard_count = %s after the doubling finished, want 4", pk, n)
		}
	}
	decide(1000) // drain
	c.Advance(time.Second)
	if got := decide(1000); got < 90 || got > 100 {
		t.Errorf("a second after the finished doubling the bucket admitted %d, want 90-100 (its refill)", got)
	}
}

// shardCount is the shard_count of shard sh among counts (shardCounts).
func shardCount(counts map[string]string, sh int) string {
	for pk, n := range counts {
		if strings.HasSuffix(pk, "#"+strconv.Itoa(sh)) {
			return n
		}
	}
	return ""
}

// TestDoublingFinishesTheOneBelow: a doubling from 2 to 4 moved shards 0
// and 1 but did not admit shards 2 and 3 (their second write failed). A
// doubling from 4 then finds shards 2 and 3 pending among the shards it
// moves: it finishes the doubling to 4 first, then its own, and every
// shard ends at 8, none pending.
func TestDoublingFinishesTheOneBelow(t *testing.T) {
	f := fakeTable(t)
	c := newClock()
	obs := &countingObserver{}
	cfg := dynamo.Config{Table: "t", Timeout: time.Second, RejectionCacheSize: dynamo.RejectionCacheOff, ShardWriteRate: -1, ShardMergeRate: -1}
	s := newStoreCfg(t, f, cfg, c, dynamo.WithObserver(obs))
	key := cascade.Key{Entity: "hot", Resource: "r"}
	lim := mustLimit(t, 100, time.Second, 0)
	if err := admin.New(s).SetShards(context.Background(), key, 2, map[string]tokenbucket.Limit{"rps": lim}); err != nil {
		t.Fatalf("SetShards(2) = %v", err)
	}
	var mu sync.Mutex
	writes := map[int]int{}
	f.SetFailItem(func(op, pk string) error {
		mu.Lock()
		defer mu.Unlock()
		for _, sh := range []int{2, 3} {
			if op == "UpdateItem" && isShard(pk, sh) {
				writes[sh]++
				return failIf(writes[sh] == 2, serverError()) // the admitting write
			}
		}
		return nil
	})
	if err := s.DoubleShards(context.Background(), key, 2); err == nil {
		t.Fatal("DoubleShards(2) with its admitting writes failing = nil, want their error")
	}
	if got := shardCounts(f); shardCount(got, 0) != "4" || shardCount(got, 1) != "4" || len(pendingShards(f)) != 2 {
		t.Fatalf("after the doubling to 4 stopped: counts %v, pending %v; want shards 0 and 1 at 4, shards 2 and 3 pending", got, pendingShards(f))
	}
	if err := s.DoubleShards(context.Background(), key, 4); err != nil {
		t.Fatalf("DoubleShards(4) = %v", err)
	}
	counts := shardCounts(f)
	if len(counts) != 8 {
		t.Errorf("shard items = %v, want 8", counts)
	}
	for pk, n := range counts {
		if n != "8" {
			t.Errorf("item %s shard_count = %s, want 8", pk, n)
		}
	}
	if p := pendingShards(f); len(p) > 0 {
		t.Errorf("pending shards = %v, want none", p)
	}
	if n := obs.doublings.Load(); n != 2 {
		t.Errorf("doublings counted = %d, want 2 (to 4 when shard 0 moved and its doubling ended, to 8)", n)
	}
}

// decideN asks s for p n times, one after another, and returns how many
// were admitted; an error fails the test.
func decideN(t *testing.T, s *dynamo.Store, p *cascade.Plan, n int) (admitted int) {
	t.Helper()
	for range n {
		dec, err := s.Acquire(context.Background(), p)
		if err != nil {
			t.Fatalf("Acquire() = %v", err)
		}
		if dec.Admitted {
			admitted++
		}
	}
	return admitted
}
