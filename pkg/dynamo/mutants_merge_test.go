package dynamo_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/admin"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// Equivalent mutants, read by internal/mutants (make mutation):
//
// mutant: CONDITIONALS_BOUNDARY merge.go `s.cfg.ShardMergeRate <= 0` idleShards: NewStore applies WithDefaults, which turns a rate of 0 into DefaultShardMergeRate, so the store never sees 0.
// mutant: CONDITIONALS_BOUNDARY resize.go `to > n` resize: wrote starts a resize only when to ≠ n, so to = n never reaches it.
// mutant: CONDITIONALS_BOUNDARY merge.go `t < 0` shardShare: at t = 0, t%n is 0, so the first condition is false either way.

// TestMergeItemsAndAfter pins what a merge of 2 shards into 1 writes and
// what the replica knows after it: both items live a week and a second
// from now (whole seconds, the clock 1,234 ms past one), the log names the
// new count, and the decisions after it use shard 0 only.
func TestMergeItemsAndAfter(t *testing.T) {
	f := fakeTable(t)
	c := newClock()
	c.Advance(1234 * time.Millisecond)
	log, hook := logtest.NewNullLogger()
	s := newStoreCfg(t, f, dynamo.Config{Table: "t", Timeout: time.Second, RejectionCacheSize: dynamo.RejectionCacheOff, ShardWriteRate: -1, ShardMergeRate: 10}, c, dynamo.WithLogger(logrus.NewEntry(log)))
	lim := slowLimit(t, 1000)
	key := cascade.Key{Entity: "e", Resource: "r"}
	if err := admin.New(s).SetShards(context.Background(), key, 2, map[string]tokenbucket.Limit{"rps": lim}); err != nil {
		t.Fatal(err)
	}
	if err := s.MergeShards(context.Background(), key, 2); err != nil {
		t.Fatal(err)
	}
	want := strconv.FormatInt(c.Now().UnixMilli()/1000+7*24*3600+1, 10)
	for sh := range 2 {
		for _, it := range bucketItems(f) {
			if pkOf(it) != bucketPK(key, sh) {
				continue
			}
			if got := it["ttl"].(*types.AttributeValueMemberN).Value; got != want {
				t.Errorf("shard %d ttl after the merge = %s, want %s (a week and a second)", sh, got, want)
			}
		}
	}
	logged := false
	for _, e := range hook.AllEntries() {
		if e.Message == "halved the shard count of an idle bucket" {
			logged = e.Data["shards"] == 1
		}
	}
	if !logged {
		t.Errorf("no log of the merge naming 1 shard: %v", hook.AllEntries())
	}
	var mu sync.Mutex
	touched := map[string]int{}
	f.SetFailItem(func(op, pk string) error {
		mu.Lock()
		defer mu.Unlock()
		touched[pk]++
		return nil
	})
	p := &cascade.Plan{Debits: []cascade.Debit{{Key: key, Limit: "rps", Bucket: lim, Amount: tokenbucket.PerToken}}}
	for range 20 {
		if dec, err := s.Acquire(context.Background(), p); err != nil || !dec.Admitted {
			t.Fatalf("Acquire() after the merge = %+v, %v", dec, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if n := touched[bucketPK(key, 1)]; n != 0 || touched[bucketPK(key, 0)] == 0 {
		t.Errorf("calls after the merge: %v, want shard 0 only", touched)
	}
}

// TestResizeFailureWarns: a doubling that DynamoDB refuses (its writes
// failing) is logged as a warning; the decisions go on.
func TestResizeFailureWarns(t *testing.T) {
	f := fakeTable(t)
	failDoublingFromOne(f)
	log, hook := logtest.NewNullLogger()
	s, err := dynamo.NewStore(context.Background(), f, dynamo.Config{Table: "t", Timeout: time.Second, RejectionCacheSize: dynamo.RejectionCacheOff, ShardWriteRate: 5, ShardMergeRate: -1}, dynamo.WithClock(newClock().Now), dynamo.WithLogger(logrus.NewEntry(log)))
	if err != nil {
		t.Fatal(err)
	}
	lim := slowLimit(t, 1000)
	p := &cascade.Plan{Debits: []cascade.Debit{{Key: cascade.Key{Entity: "e", Resource: "r"}, Limit: "rps", Bucket: lim, Amount: tokenbucket.PerToken}}}
	for range 10 {
		if dec, err := s.Acquire(context.Background(), p); err != nil || !dec.Admitted {
			t.Fatalf("Acquire() = %+v, %v", dec, err)
		}
	}
	warnings := func() int {
		n := 0
		for _, e := range hook.AllEntries() {
			if e.Level == logrus.WarnLevel && e.Message == "changing the shard count of a bucket failed" {
				n++
			}
		}
		return n
	}
	// The doubling runs in the background; Close would cancel it.
	for deadline := time.Now().Add(5 * time.Second); warnings() == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	_ = s.Close()
	warned := warnings()
	if warned == 0 {
		t.Errorf("no warning of a failed doubling: %v", hook.AllEntries())
	}
}
