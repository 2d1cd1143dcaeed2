package dynamo_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/admin"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// TestHotShardedWritesPaced: four replicas, 20 callers each, ask about
// three times the limit of a bucket of four shards, with DynamoDB's
// latencies. Every replica writing every shard as soon as a decision
// arrives, races lost to the others included, made 0.92 UpdateItem a
// decision; paced, each replica on a home shard of its own, claiming what
// the others likely left, it makes about 0.05 (at most 0.08 here). The
// fleet never admits more than the bucket holds, and admits most of it.
func TestHotShardedWritesPaced(t *testing.T) {
	const replicas, callers, rate = 4, 20, 2000
	inBubble(t, func(t *testing.T) {
		f := fakeTable(t)
		o := dynamotest.LikeDynamoDB()
		o.Seed = 3
		f.SetOptions(o)
		lim := mustLimit(t, rate, time.Second, 0)
		key := cascade.Key{Entity: "hot", Resource: "api"}
		p := &cascade.Plan{Debits: []cascade.Debit{{Key: key, Limit: "x", Bucket: lim, Amount: tokenbucket.PerToken}}}
		cfg := dynamo.Config{Table: "t", Timeout: 50 * time.Millisecond}
		var stores []*dynamo.Store
		for range replicas {
			s, err := dynamo.NewStore(context.Background(), f, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = s.Close() }()
			stores = append(stores, s)
		}
		if err := admin.New(stores[0]).SetShards(context.Background(), key, 4, map[string]tokenbucket.Limit{"x": lim}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		const run, from = 3 * time.Second, time.Second
		var decided, admitted, counted atomic.Int64
		var wg sync.WaitGroup
		for _, s := range stores {
			for range callers {
				wg.Go(func() {
					for time.Since(start) < run {
						dec, err := s.Acquire(context.Background(), p)
						if err == nil && dec.Admitted {
							admitted.Add(1)
						}
						if time.Since(start) >= from {
							counted.Add(1)
						}
						decided.Add(1)
						time.Sleep(time.Millisecond) // a caller's pause: the bubble's time moves on
					}
				})
			}
		}
		time.Sleep(from)
		writes0 := f.Calls("UpdateItem")
		wg.Wait()
		writes := f.Calls("UpdateItem") - writes0
		per := float64(writes) / float64(counted.Load())
		allowed := float64(rate) * (1 + time.Since(start).Seconds()) // the burst and the refill
		t.Logf("%d decisions, %d admitted of %.0f allowed; from %v: %d UpdateItem for %d decisions (%.4f each)",
			decided.Load(), admitted.Load(), allowed, from, writes, counted.Load(), per)
		if per > 0.08 {
			t.Errorf("%.4f UpdateItem a decision on a hot sharded bucket, want at most 0.08", per)
		}
		if got := float64(admitted.Load()); got > allowed || got < 0.9*allowed {
			t.Errorf("admitted %.0f, want at most the %.0f allowed and at least 0.9 of it", got, allowed)
		}
	})
}

// TestHotShardRefusalStaysOnItsShard: a repayment lands on shard 0 of a
// hot bucket of four and leaves it owing eight seconds of its refill; the
// other three shards are full. A replica's refusal on shard 0 was its
// rejection cache's for up to a second, and answered every decision on
// that image though its home had moved on: the replica admitted 0.22 of
// the limit from 1 s to 3 s. A refusal on a shard now answers only the
// decisions bound for that shard, and the replica admits what shards 1 to
// 3 hold (their burst and refill: at most 3/4 of the limit over the run
// and a second's burst), about 1.0 of the limit from 1 s to 3 s.
func TestHotShardRefusalStaysOnItsShard(t *testing.T) {
	const callers, rate = 100, 2000
	inBubble(t, func(t *testing.T) {
		f := fakeTable(t)
		o := dynamotest.LikeDynamoDB()
		o.Seed = 5
		f.SetOptions(o)
		lim := mustLimit(t, rate, time.Second, 0)
		key := cascade.Key{Entity: "hot", Resource: "api"}
		p := &cascade.Plan{Debits: []cascade.Debit{{Key: key, Limit: "p", Bucket: lim, Amount: tokenbucket.PerToken}}}
		s, err := dynamo.NewStore(context.Background(), f, dynamo.Config{Table: "t", Timeout: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = s.Close() }()
		if err := admin.New(s).SetShards(context.Background(), key, 4, map[string]tokenbucket.Limit{"p": lim}); err != nil {
			t.Fatal(err)
		}
		r := repayment("r1", time.Now().UnixMicro(), key, lim, 4000*tokenbucket.PerToken)
		if _, err := s.Repay(context.Background(), r); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		const run, from = 3 * time.Second, time.Second
		var all, admitted atomic.Int64
		var wg sync.WaitGroup
		for range callers {
			wg.Go(func() {
				for time.Since(start) < run {
					dec, err := s.Acquire(context.Background(), p)
					if err == nil && dec.Admitted {
						all.Add(1)
						if time.Since(start) >= from {
							admitted.Add(1)
						}
					}
					time.Sleep(time.Millisecond)
				}
			})
		}
		wg.Wait()
		got := float64(admitted.Load()) / (rate * (run - from).Seconds())
		held := 0.75 * rate * (1 + time.Since(start).Seconds())
		t.Logf("admitted %d, %d from %v: %.2f of the limit; shards 1 to 3 held %.0f", all.Load(), admitted.Load(), from, got, held)
		if got < 0.6 {
			t.Errorf("admitted %.2f of the limit from %v, want what shards 1 to 3 hold (at least 0.6)", got, from)
		}
		if float64(all.Load()) > held {
			t.Errorf("admitted %d, more than the %.0f shards 1 to 3 held", all.Load(), held)
		}
	})
}
