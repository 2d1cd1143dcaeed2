package admin_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/admin"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// TestTopUpSplitsExactly: a top-up of 7 millitokens over a drained bucket
// of 4 shards adds exactly 7 (1 a shard, the remainder on shard 0), and one
// of 4 tokens 4 more (a shard's level is in whole-bucket units: before this
// test, a top-up of a sharded bucket credited 1/n of its amount); 0 is
// refused, and so is one past MaxMillitokens while MaxMillitokens itself
// is applied; a top-up whose transaction fails says so.
func TestTopUpSplitsExactly(t *testing.T) {
	f := fakeTable(t)
	s := newStoreCfg(t, f, dynamo.Config{Table: "t", Timeout: time.Second, RejectionCacheSize: dynamo.RejectionCacheOff, ShardWriteRate: -1, ShardMergeRate: -1}, newClock())
	ctx := context.Background()
	lim := slowLimit(t, 8)
	limits := map[string]tokenbucket.Limit{"rps": lim}
	key := cascade.Key{Entity: "e", Resource: "r"}
	if err := admin.New(s).SetShards(ctx, key, 4, limits); err != nil {
		t.Fatal(err)
	}
	total := func() tokenbucket.Millitokens {
		t.Helper()
		st, err := admin.New(s).Bucket(ctx, key, limits)
		if err != nil {
			t.Fatal(err)
		}
		return st.Total()["rps"].Tokens
	}
	p := &cascade.Plan{Debits: []cascade.Debit{{Key: key, Limit: "rps", Bucket: lim, Amount: tokenbucket.PerToken}}}
	for i := 0; total() > 0; i++ {
		if i > 200 {
			t.Fatalf("a bucket of 8 tokens still holds %d after 200 decisions", total())
		}
		if _, err := s.Acquire(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := admin.New(s).TopUp(ctx, key, "rps", 0, limits); err == nil {
		t.Error("TopUp(0) = nil error, want a top-up of at least 1 millitoken")
	}
	for _, c := range []struct{ add, want tokenbucket.Millitokens }{{7, 7}, {4000, 4007}} {
		if _, ok, err := admin.New(s).TopUp(ctx, key, "rps", c.add, limits); err != nil || !ok {
			t.Fatalf("TopUp(%d) = %t, %v", c.add, ok, err)
		}
		if got := total(); got != c.want {
			t.Errorf("after a top-up of %d millitokens: %d, want %d", c.add, got, c.want)
		}
	}
	if _, _, err := admin.New(s).TopUp(ctx, key, "rps", tokenbucket.MaxMillitokens+1, limits); err == nil {
		t.Error("TopUp(MaxMillitokens+1) = nil error, want a top-up of at most MaxMillitokens")
	}
	if _, ok, err := admin.New(s).TopUp(ctx, key, "rps", tokenbucket.MaxMillitokens, limits); err != nil || !ok {
		t.Errorf("TopUp(MaxMillitokens) = %t, %v, want it applied", ok, err)
	}
	failOn(f, "TransactWriteItems", 0, serverError())
	if _, _, err := admin.New(s).TopUp(ctx, key, "rps", 7, limits); err == nil {
		t.Error("TopUp() with its transaction failing = nil error")
	}
}

// TestResetTriesThreeTimesAndSetsTTL: a reset whose transaction keeps
// failing its condition (the shard count changing under it) reads and
// tries again, 3 times in all; one that lands leaves each shard to live a
// week from now, in whole seconds.
func TestResetTriesThreeTimesAndSetsTTL(t *testing.T) {
	f := fakeTable(t)
	c := newClock()
	c.Advance(1234 * time.Millisecond)
	s := newStoreCfg(t, f, dynamo.Config{Table: "t", Timeout: time.Second, RejectionCacheSize: dynamo.RejectionCacheOff, ShardWriteRate: -1, ShardMergeRate: -1}, c)
	ctx := context.Background()
	lim := slowLimit(t, 8)
	limits := map[string]tokenbucket.Limit{"rps": lim}
	key := cascade.Key{Entity: "e", Resource: "r"}
	if err := admin.New(s).SetShards(ctx, key, 2, limits); err != nil {
		t.Fatal(err)
	}
	failOn(f, "TransactWriteItems", 0, transactionCanceled("ConditionalCheckFailed", "None"))
	before := f.Calls("TransactWriteItems")
	if _, _, err := admin.New(s).ResetBucket(ctx, key, limits); err == nil {
		t.Error("ResetBucket() with every condition failing = nil error")
	}
	if n := f.Calls("TransactWriteItems") - before; n != 3 {
		t.Errorf("ResetBucket() tried %d transactions, want 3", n)
	}
	f.SetFail(nil)
	if _, ok, err := admin.New(s).ResetBucket(ctx, key, limits); err != nil || !ok {
		t.Fatalf("ResetBucket() = %t, %v", ok, err)
	}
	want := strconv.FormatInt(c.Now().UnixMilli()/1000+7*24*3600, 10)
	for _, it := range bucketItems(f) {
		if got := it["ttl"].(*types.AttributeValueMemberN).Value; got != want {
			t.Errorf("%s ttl after a reset = %s, want %s (a week)", pkOf(it), got, want)
		}
	}
}
