package dynamo_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/internal/dynamotest/rig"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/admin"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// lossy is the fake with a transaction whose answer is lost: the first
// lose TransactWriteItems calls land, and the caller is told they timed
// out.
type lossy struct {
	*dynamotest.Fake
	lose atomic.Int64
}

func (l *lossy) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	out, err := l.Fake.TransactWriteItems(ctx, in, opts...)
	if l.lose.Add(-1) >= 0 {
		return nil, &smithy.OperationError{ServiceID: "DynamoDB", OperationName: "TransactWriteItems", Err: context.DeadlineExceeded}
	}
	return out, err
}

var newFakeTable = rig.FakeTable

func settlement(c *clock, id string, ds ...cascade.Debit) *cascade.Settlement {
	return &cascade.Settlement{ID: id, Expires: c.Now().Add(time.Hour), Debits: ds}
}

// TestSettleAnswerLost: the transaction lands but its answer is lost (a
// timeout), once or several times, or fails before landing (a server
// error): Settle tries again, the charge lands exactly once, and Settle
// reports it applied, with the bucket's level read again.
func TestSettleAnswerLost(t *testing.T) {
	lim := mustLimit(t, 10, time.Hour, 0)
	key := cascade.Key{Entity: "e", Resource: "r"}
	serverErr := &types.InternalServerError{Message: aws.String("boom")}
	tests := []struct {
		name   string
		lose   int64 // answers lost after landing
		before int64 // server errors before anything lands
		calls  int   // TransactWriteItems calls in all
	}{
		{"answer lost once", 1, 0, 2},
		{"answer lost three times", 3, 0, 4},
		{"server error twice, then answered", 0, 2, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := &lossy{Fake: newFakeTable(t)}
			c := newClock()
			s := newStoreCfg(t, api, dynamo.Config{Table: "t", Timeout: 50 * time.Millisecond, RejectionCacheSize: dynamo.RejectionCacheOff}, c)
			var failed atomic.Int64
			api.SetFail(func(_ context.Context, op string) error {
				if op == "TransactWriteItems" && failed.Add(1) <= tt.before {
					return serverErr
				}
				return nil
			})
			api.lose.Store(tt.lose)
			api.ResetCalls()
			got, err := s.Settle(context.Background(), settlement(c, "lost", cascade.Debit{Key: key, Limit: "x", Bucket: lim, Amount: 3000, Op: cascade.Charge}))
			if err != nil || got.Duplicate || len(got.Statuses) != 1 || got.Statuses[0].Remaining != 7000 {
				t.Fatalf("Settle() = %+v, %v, want applied, 7000 left", got, err)
			}
			if n := api.Calls("TransactWriteItems"); n != tt.calls {
				t.Errorf("TransactWriteItems calls = %d, want %d", n, tt.calls)
			}
			if left := tokensOf(t, s, lim, key); left[0] != 7000 {
				t.Errorf("after Settle() the bucket holds %d, want 7000 (charged once)", left[0])
			}
			if got, err := s.Settle(context.Background(), settlement(c, "lost", cascade.Debit{Key: key, Limit: "x", Bucket: lim, Amount: 3000, Op: cascade.Charge})); err != nil || !got.Duplicate {
				t.Errorf("Settle(lost) again = %+v, %v, want a duplicate", got, err)
			}
		})
	}
}

// TestSettleOtherWriter: a marker written by another replica (another
// Settle call, so another nonce) makes a duplicate, even when this
// replica's own transaction went unanswered meanwhile.
func TestSettleOtherWriter(t *testing.T) {
	lim := mustLimit(t, 10, time.Hour, 0)
	key := cascade.Key{Entity: "e", Resource: "r"}
	api := &lossy{Fake: newFakeTable(t)}
	c := newClock()
	a, b := newStore(t, api, "t", c), newStore(t, api, "t", c)
	d := cascade.Debit{Key: key, Limit: "x", Bucket: lim, Amount: 2000, Op: cascade.Charge}
	api.lose.Store(1) // b's transaction lands, unanswered: b tries again
	if got, err := b.Settle(context.Background(), settlement(c, "id", d)); err != nil || got.Duplicate {
		t.Fatalf("b.Settle() = %+v, %v, want applied", got, err)
	}
	if got, err := a.Settle(context.Background(), settlement(c, "id", d)); err != nil || !got.Duplicate || got.Statuses != nil {
		t.Fatalf("a.Settle() of b's ID = %+v, %v, want a duplicate without statuses", got, err)
	}
	if left := tokensOf(t, a, lim, key); left[0] != 8000 {
		t.Errorf("the bucket holds %d, want 8000 (charged once)", left[0])
	}
	var marker map[string]types.AttributeValue
	for _, item := range api.Items("t") {
		if pk := item["PK"].(*types.AttributeValueMemberS).Value; strings.Contains(pk, "/LEASE#") {
			if pk != "ndefault/LEASE#id" || item["SK"].(*types.AttributeValueMemberS).Value != "#SETTLED" {
				t.Errorf("marker key = %s, want ndefault/LEASE#id, #SETTLED", pk)
			}
			marker = item
		}
	}
	ttl, _ := strconv.ParseInt(marker["ttl"].(*types.AttributeValueMemberN).Value, 10, 64)
	if want := c.Now().Add(2 * time.Hour).Unix(); ttl != want {
		t.Errorf("marker ttl = %d, want %d (Expires + an hour)", ttl, want)
	}
}

// TestSettleUnavailable: a transaction that never answers ends when the
// budget does, with an error wrapping ErrUnavailable; a call DynamoDB
// refuses as a client error is not tried again.
func TestSettleUnavailable(t *testing.T) {
	lim := mustLimit(t, 10, time.Hour, 0)
	d := cascade.Debit{Key: cascade.Key{Entity: "e", Resource: "r"}, Limit: "x", Bucket: lim, Amount: 1000, Op: cascade.Refund}
	tests := []struct {
		name  string
		err   error
		calls func(n int) bool
		most  time.Duration
	}{
		{"server errors", &types.InternalServerError{Message: aws.String("boom")}, func(n int) bool { return n > 3 }, 2 * time.Second},
		{"refused", &smithy.GenericAPIError{Code: "ValidationException", Fault: smithy.FaultClient}, func(n int) bool { return n == 1 }, 100 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeTable(t)
			c := newClock()
			s := newStoreCfg(t, f, dynamo.Config{Table: "t", Timeout: 20 * time.Millisecond, RejectionCacheSize: dynamo.RejectionCacheOff}, c)
			failOn(f, "TransactWriteItems", 0, tt.err)
			start := time.Now()
			got, err := s.Settle(context.Background(), settlement(c, "x", d))
			if elapsed := time.Since(start); !errors.Is(err, dynamo.ErrUnavailable) || elapsed > tt.most {
				t.Errorf("Settle() = %+v, %v after %v, want an error wrapping ErrUnavailable within %v", got, err, elapsed, tt.most)
			}
			if n := f.Calls("TransactWriteItems"); !tt.calls(n) {
				t.Errorf("TransactWriteItems calls = %d", n)
			}
		})
	}
}

// TestSettleStaleImage: a replica's cached image is a second old at most,
// and another replica consumed since: the refund's condition fails, and
// the settlement is decided again on what the item holds (never lifted
// to full from the stale image).
func TestSettleStaleImage(t *testing.T) {
	lim := mustLimit(t, 10, time.Hour, 0)
	key := cascade.Key{Entity: "e", Resource: "r"}
	f := newFakeTable(t)
	c := newClock()
	a, b := newStore(t, f, "t", c), newStore(t, f, "t", c)
	take := func(s *dynamo.Store, n tokenbucket.Millitokens) {
		t.Helper()
		if dec, err := s.Acquire(context.Background(), &cascade.Plan{Debits: []cascade.Debit{{Key: key, Limit: "x", Bucket: lim, Amount: n}}}); err != nil || !dec.Admitted {
			t.Fatalf("Acquire(%d) = %+v, %v", n, dec, err)
		}
	}
	take(a, 1000) // a's image: 9 left
	take(b, 5000) // 4 left
	got, err := a.Settle(context.Background(), settlement(c, "r", cascade.Debit{Key: key, Limit: "x", Bucket: lim, Amount: 2000, Op: cascade.Refund}))
	if err != nil || got.Duplicate || got.Statuses[0].Remaining != 6000 {
		t.Fatalf("Settle(refund 2000) = %+v, %v, want applied, 6000 left", got, err)
	}
	if left := tokensOf(t, b, lim, key); left[0] != 6000 {
		t.Errorf("the bucket holds %d, want 6000", left[0])
	}
}

// levels returns the stored level of limit "x" on each of n shards of key
// ("" for a shard without one).
func levels(t *testing.T, api dynamo.API, table string, key cascade.Key, n int) []string {
	t.Helper()
	out := make([]string, n)
	for sh := range n {
		res, err := api.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true), Key: map[string]types.AttributeValue{
			"PK": &types.AttributeValueMemberS{Value: "ndefault/BUCKET#" + key.Entity + "#" + key.Resource + "#" + strconv.Itoa(sh)},
			"SK": &types.AttributeValueMemberS{Value: "#STATE"},
		}})
		if err != nil {
			t.Fatalf("GetItem(shard %d) = %v", sh, err)
		}
		if x, ok := res.Item["b_x_x"].(*types.AttributeValueMemberN); ok {
			out[sh] = x.Value
		}
	}
	return out
}

// changed returns the shards whose level differs between before and after.
func changed(before, after []string) []int {
	var out []int
	for i := range before {
		if before[i] != after[i] {
			out = append(out, i)
		}
	}
	return out
}

// TestSettleShard: on a bucket of four shards, Acquire reports the shard
// that decided, and a settlement naming a shard writes that shard alone,
// its amount counted four times (a shard holds a quarter of the level); a
// shard the item does not have is settled on shard 0.
func TestSettleShard(t *testing.T) {
	for _, be := range backends() {
		t.Run(be.Name, func(t *testing.T) {
			api, table := be.API(t)
			c := newClock()
			s := newStore(t, api, table, c)
			lim := mustLimit(t, 100, time.Hour, 0)
			key := cascade.Key{Entity: "sharded", Resource: "r"}
			if err := admin.New(s).SetShards(context.Background(), key, 4, map[string]tokenbucket.Limit{"x": lim}); err != nil {
				t.Fatalf("SetShards(4) = %v", err)
			}
			before := levels(t, api, table, key, 4)
			dec, err := s.Acquire(context.Background(), &cascade.Plan{Debits: []cascade.Debit{{Key: key, Limit: "x", Bucket: lim, Amount: 1000}}})
			if err != nil || !dec.Admitted {
				t.Fatalf("Acquire() = %+v, %v", dec, err)
			}
			after := levels(t, api, table, key, 4)
			if got := changed(before, after); len(got) != 1 || got[0] != dec.Statuses[0].Shard {
				t.Errorf("Acquire() reported shard %d, shards written %v", dec.Statuses[0].Shard, got)
			}
			for _, tt := range []struct {
				name        string
				shard, want int
			}{{"shard 2", 2, 2}, {"shard 3", 3, 3}, {"shard 7 of 4", 7, 0}} {
				before := levels(t, api, table, key, 4)
				d := cascade.Debit{Key: key, Limit: "x", Bucket: lim, Amount: 5000, Op: cascade.Charge, Shard: tt.shard}
				got, err := s.Settle(context.Background(), settlement(c, tt.name, d))
				if err != nil || got.Duplicate || got.Statuses[0].Shard != tt.want {
					t.Fatalf("Settle(%s) = %+v, %v, want applied on shard %d", tt.name, got, err, tt.want)
				}
				if w := changed(before, levels(t, api, table, key, 4)); len(w) != 1 || w[0] != tt.want {
					t.Errorf("Settle(%s) wrote shards %v, want only %d", tt.name, w, tt.want)
				}
				// The shard's estimate of the whole bucket: 20 tokens less
				// than the shard held (the 5 charged, four times).
				if rem := got.Statuses[0].Remaining; rem > 80_000 {
					t.Errorf("Settle(%s) left %d, want at most 80000", tt.name, rem)
				}
			}
		})
	}
}

// TestLaneMeetsTransaction: a lane's write that meets a transaction in
// flight on its item (TransactionConflictException: nothing written) is a
// race lost: the lane reads the item again and writes once more, so the
// decision and a charge land, once.
func TestLaneMeetsTransaction(t *testing.T) {
	lim := mustLimit(t, 10, time.Hour, 0)
	key := cascade.Key{Entity: "e", Resource: "r"}
	for _, op := range []cascade.Op{cascade.Consume, cascade.Charge} {
		t.Run(op.String(), func(t *testing.T) {
			f := newFakeTable(t)
			c := newClock()
			s := newStoreCfg(t, f, dynamo.Config{Table: "t", Timeout: 50 * time.Millisecond, RejectionCacheSize: dynamo.RejectionCacheOff}, c)
			var seen atomic.Int64
			f.SetFailItem(func(op, _ string) error {
				if op == "UpdateItem" && seen.Add(1) <= 2 {
					return &types.TransactionConflictException{Message: aws.String("transaction in flight")}
				}
				return nil
			})
			dec, err := s.Acquire(context.Background(), &cascade.Plan{Debits: []cascade.Debit{{Key: key, Limit: "x", Bucket: lim, Amount: 2000, Op: op}}})
			if err != nil || !dec.Admitted {
				t.Fatalf("Acquire(%s) after two conflicts = %+v, %v, want admitted", op, dec, err)
			}
			f.SetFailItem(nil)
			if left := tokensOf(t, s, lim, key); left[0] != 8000 {
				t.Errorf("the bucket holds %d, want 8000 (debited once)", left[0])
			}
		})
	}
}

// TestAcquireShardOfRefusal: a refusal answered from the rejection cache
// reports the shard of the refusal it repeats, and a plan over two items
// reports each debit's own item's shard. (Buckets are tried until a
// refusal lands on a shard other than 0.)
func TestAcquireShardOfRefusal(t *testing.T) {
	f := newFakeTable(t)
	c := newClock()
	obs := &countingObserver{}
	s := newStoreCfg(t, f, dynamo.Config{Table: "t", Timeout: time.Second}, c, dynamo.WithObserver(obs))
	lim := mustLimit(t, 4, time.Hour, 0)
	for k := range 20 {
		hot, plain := cascade.Key{Entity: "hot-" + strconv.Itoa(k), Resource: "r"}, cascade.Key{Entity: "plain-" + strconv.Itoa(k), Resource: "r"}
		if err := admin.New(s).SetShards(context.Background(), hot, 4, map[string]tokenbucket.Limit{"x": lim}); err != nil {
			t.Fatalf("SetShards(4) = %v", err)
		}
		two := &cascade.Plan{Debits: []cascade.Debit{{Key: plain, Limit: "x", Bucket: lim, Amount: 1000}, {Key: hot, Limit: "x", Bucket: lim, Amount: 1000}}}
		var refusal cascade.Decision
		for i := 0; i < 20 && (refusal.Statuses == nil || refusal.Admitted); i++ {
			dec, err := s.Acquire(context.Background(), two)
			if err != nil {
				t.Fatalf("Acquire(two items) = %v", err)
			}
			if dec.Statuses[0].Shard != 0 || dec.Statuses[1].Shard < 0 || dec.Statuses[1].Shard > 3 {
				t.Fatalf("Acquire(two items) shards = %d, %d, want 0 and one of 0..3", dec.Statuses[0].Shard, dec.Statuses[1].Shard)
			}
			refusal = dec
		}
		if refusal.Admitted {
			t.Fatalf("Acquire(two items) admitted 20 times of a bucket of 4")
		}
		if refusal.Statuses[1].Shard == 0 {
			continue
		}
		hits := obs.hits.Load()
		again, err := s.Acquire(context.Background(), &cascade.Plan{Debits: two.Debits[1:]})
		if err != nil || again.Admitted || obs.hits.Load() != hits+1 {
			t.Fatalf("Acquire(hot) after a refusal = %+v, %v (cache hits %d → %d), want refused from the rejection cache", again, err, hits, obs.hits.Load())
		}
		if got, want := again.Statuses[0].Shard, refusal.Statuses[1].Shard; got != want {
			t.Errorf("a refusal from the rejection cache reports shard %d, want %d (the refusal it repeats)", got, want)
		}
		return
	}
	t.Fatalf("20 buckets of 4 shards each refused on shard 0")
}

// TestSettleTooManyItems: a transaction holds 100 items, the marker one
// of them: a settlement of 100 bucket items is invalid, and writes nothing.
func TestSettleTooManyItems(t *testing.T) {
	f := newFakeTable(t)
	c := newClock()
	s := newStore(t, f, "t", c)
	lim := mustLimit(t, 10, time.Hour, 0)
	var ds []cascade.Debit
	for i := range 100 {
		ds = append(ds, cascade.Debit{Key: cascade.Key{Entity: "e" + strconv.Itoa(i), Resource: "r"}, Limit: "x", Bucket: lim, Amount: 1000, Op: cascade.Charge})
	}
	if got, err := s.Settle(context.Background(), settlement(c, "big", ds...)); !errors.Is(err, cascade.ErrSettlement) {
		t.Errorf("Settle(100 items) = %+v, %v, want an error wrapping ErrSettlement", got, err)
	}
	if got, err := s.Settle(context.Background(), nil); !errors.Is(err, cascade.ErrSettlement) {
		t.Errorf("Settle(nil) = %+v, %v, want an error wrapping ErrSettlement", got, err)
	}
	if got, err := s.Settle(context.Background(), settlement(c, "big", ds[:99]...)); err != nil || got.Duplicate || len(got.Statuses) != 99 {
		t.Errorf("Settle(99 items) = duplicate %v, %d statuses, %v, want applied", got.Duplicate, len(got.Statuses), err)
	}
}
