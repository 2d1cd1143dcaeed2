package dynamo_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/admin"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// TestChargeRequeuedForFourTimeouts: a charge whose item DynamoDB
// throttles past one batch's budget is queued again, for up to 4×Timeout:
// throttled for 750 ms with a Timeout of 500 ms, it lands.
func TestChargeRequeuedForFourTimeouts(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		f := fakeTable(t)
		api := &scripted{API: f}
		s := newStoreCfg(t, api, dynamo.Config{Table: "t", Timeout: 500 * time.Millisecond, RejectionCacheSize: dynamo.RejectionCacheOff}, newClock())
		lim := mustLimit(t, 10, time.Hour, 0)
		until := time.Now().Add(750 * time.Millisecond)
		api.write = func(string, int) (error, bool) { return failIf(time.Now().Before(until), throttled()), false }
		api.arm()
		chargeLands(t, s, lim, "throttled for 750 ms")
	})
}

// TestQueuedPastBudgetIsContended: a decision still queued behind its
// item's write when its budget ends is withdrawn and refused as contended,
// not failed.
func TestQueuedPastBudgetIsContended(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		f := fakeTable(t)
		obs := &countingObserver{}
		s := newStoreCfg(t, f, dynamo.Config{Table: "t", Timeout: 30 * time.Millisecond, RejectionCacheSize: dynamo.RejectionCacheOff}, newClock(), dynamo.WithObserver(obs))
		lim := mustLimit(t, 10, time.Hour, 0)
		p := &cascade.Plan{Debits: []cascade.Debit{{Key: cascade.Key{Entity: "a", Resource: "r"}, Limit: "x", Bucket: lim, Amount: tokenbucket.PerToken}}}
		if _, err := s.Acquire(context.Background(), p); err != nil {
			t.Fatalf("Acquire() = %v", err)
		}
		f.SetFail(func(_ context.Context, op string) error {
			if op == "UpdateItem" {
				time.Sleep(100 * time.Millisecond)
			}
			return nil
		})
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = s.Acquire(context.Background(), p) // its write takes 100 ms
		}()
		synctest.Wait()
		dec, err := s.Acquire(context.Background(), p)
		if err != nil || dec.Admitted || dec.Statuses[0].OK {
			t.Errorf("Acquire() queued past its budget = %+v, %v, want refused as contended", dec, err)
		}
		if n := obs.contended.Load(); n != 1 {
			t.Errorf("contended decisions = %d, want 1", n)
		}
		<-done
	})
}

// readLog records the partition key of each GetItem.
type readLog struct {
	dynamo.API
	mu  sync.Mutex
	pks []string
}

func (r *readLog) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	r.mu.Lock()
	r.pks = append(r.pks, pkOf(in.Key))
	r.mu.Unlock()
	return r.API.GetItem(ctx, in, o...)
}

func (r *readLog) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	pks := r.pks
	r.pks = nil
	return pks
}

// TestRefusedShardTriesTwoOthers: a decision refused on a shard of an item
// of several, every shard empty, tries two other shards, each other than
// the one tried just before: at most three shards of the item (both of an
// item of two), each read to stand the refusal on DynamoDB's image.
func TestRefusedShardTriesTwoOthers(t *testing.T) {
	for _, n := range []int{2, 4} {
		t.Run(fmt.Sprint(n, " shards"), func(t *testing.T) {
			api := &readLog{API: fakeTable(t)}
			s := newStore(t, api, "t", newClock())
			lim := mustLimit(t, uint64(n), time.Hour, 0)
			key := cascade.Key{Entity: "e", Resource: "r"}
			if err := admin.New(s).SetShards(context.Background(), key, n, map[string]tokenbucket.Limit{"x": lim}); err != nil {
				t.Fatal(err)
			}
			p := &cascade.Plan{Debits: []cascade.Debit{{Key: key, Limit: "x", Bucket: lim, Amount: tokenbucket.PerToken}}}
			for range 40 * n { // every shard emptied, whichever each decision picks
				if _, err := s.Acquire(context.Background(), p); err != nil {
					t.Fatal(err)
				}
			}
			most := 0
			for range 20 {
				api.take()
				if dec, err := s.Acquire(context.Background(), p); err != nil || dec.Admitted {
					t.Fatalf("Acquire(empty bucket) = %+v, %v, want refused", dec, err)
				}
				seen := map[string]bool{}
				for _, pk := range api.take() {
					if !strings.Contains(pk, "/BUCKET#e#r#") {
						continue
					}
					shard, err := strconv.Atoi(pk[strings.LastIndex(pk, "#")+1:])
					if err != nil || shard < 0 || shard >= n {
						t.Fatalf("a refused decision read %s, want shards below %d", pk, n)
					}
					seen[pk] = true
				}
				if len(seen) > 3 || n == 2 && len(seen) != 2 {
					t.Fatalf("a refused decision read %d shards of %d, want %d", len(seen), n, min(3, n))
				}
				most = max(most, len(seen))
			}
			if most != min(3, n) {
				t.Errorf("refused decisions read at most %d shards of %d, want %d", most, n, min(3, n))
			}
		})
	}
}
