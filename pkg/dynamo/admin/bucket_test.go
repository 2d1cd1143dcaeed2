package admin_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/admin"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// TestBucketShowAndReset: Bucket reads every shard of a bucket of four
// without consuming (two reads agree, and 5 decisions between reads take
// exactly 5 tokens across the shards); ResetBucket refills every shard to
// its share of the capacity, keeps the usage counters, and writes an audit
// record naming the principal with the bucket as it was; a bucket without
// an item is not written.
func TestBucketShowAndReset(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.Name, func(t *testing.T) {
			api, table := b.API(t)
			c := newClock()
			s := newStore(t, api, table, c, dynamo.WithPrincipal("alice"))
			ctx := context.Background()
			lim, err := tokenbucket.NewLimit(100*tokenbucket.PerToken, 1, 24*time.Hour) // no refill to speak of
			if err != nil {
				t.Fatalf("NewLimit() = %v", err)
			}
			key := cascade.Key{Namespace: "ops", Entity: "tenant", Resource: "r"}
			if err := admin.New(s).SetShards(ctx, key, 4, map[string]tokenbucket.Limit{"rpm": lim}); err != nil {
				t.Fatalf("SetShards() = %v", err)
			}
			total := func(when string) admin.LimitState {
				t.Helper()
				st, err := admin.New(s).Bucket(ctx, key, nil)
				if err != nil {
					t.Fatalf("%s: Bucket() = %v", when, err)
				}
				if st.ShardCount != 4 || len(st.Shards) != 4 {
					t.Fatalf("%s: Bucket() = %d shards (count %d), want 4", when, len(st.Shards), st.ShardCount)
				}
				return st.Total()["rpm"]
			}
			if got := total("new"); got.Tokens != 100*tokenbucket.PerToken || got.Limit != lim {
				t.Fatalf("Bucket() of a new bucket = %+v, want 100 tokens of %v", got, lim)
			}
			if got := total("again"); got.Tokens != 100*tokenbucket.PerToken {
				t.Fatalf("Bucket() read twice = %d, want 100 tokens: a read consumes nothing", got.Tokens)
			}
			p := &cascade.Plan{Debits: []cascade.Debit{{Key: key, Limit: "rpm", Bucket: lim, Amount: tokenbucket.PerToken}}}
			for i := range 5 {
				if dec, err := s.Acquire(ctx, p); err != nil || !dec.Admitted {
					t.Fatalf("Acquire() #%d = %+v, %v, want admitted", i, dec, err)
				}
			}
			after := total("after 5")
			if after.Tokens != 95*tokenbucket.PerToken || after.Consumed != 5*int64(tokenbucket.PerToken) {
				t.Fatalf("Bucket() after 5 decisions = %d tokens, %d consumed, want 95 tokens and 5 000 millitokens consumed", after.Tokens, after.Consumed)
			}

			before, reset, err := admin.New(s).ResetBucket(ctx, key, nil)
			if err != nil || !reset || before.Total()["rpm"].Tokens != 95*tokenbucket.PerToken {
				t.Fatalf("ResetBucket() = %+v, %t, %v, want the bucket of 95 tokens, reset", before.Total(), reset, err)
			}
			st, err := admin.New(s).Bucket(ctx, key, nil)
			if err != nil {
				t.Fatalf("Bucket() after the reset = %v", err)
			}
			for _, sh := range st.Shards {
				if l := sh.Limits[0]; l.Tokens != 25*tokenbucket.PerToken {
					t.Errorf("shard %d after the reset holds %d, want its share 25 000", sh.Shard, l.Tokens)
				}
			}
			if got := st.Total()["rpm"]; got.Tokens != 100*tokenbucket.PerToken || got.Consumed != 5*int64(tokenbucket.PerToken) {
				t.Errorf("Bucket() after the reset = %d tokens, %d consumed, want 100 tokens and the usage kept (5 000)", got.Tokens, got.Consumed)
			}
			recs, err := admin.New(s).Audit(ctx, admin.Scope{Namespace: "ops", Entity: "tenant"})
			if err != nil || len(recs) != 1 {
				t.Fatalf("Audit(tenant) = %+v, %v, want the reset", recs, err)
			}
			if r := recs[0]; r.Action != "bucket.reset" || r.Principal != "alice" || !strings.Contains(r.Before, "rpm=95/100") ||
				r.Scope != `entity "tenant" resource "r"` || !r.At.Equal(c.Now()) {
				t.Errorf("Audit(tenant) = %+v, want bucket.reset by alice at %v from rpm=95/100", r, c.Now())
			}

			none := cascade.Key{Namespace: "ops", Entity: "nobody", Resource: "r"}
			if _, reset, err := admin.New(s).ResetBucket(ctx, none, map[string]tokenbucket.Limit{"rpm": lim}); err != nil || reset {
				t.Errorf("ResetBucket(a bucket without an item) = %t, %v, want false: nothing to reset", reset, err)
			}
			if recs, _ := admin.New(s).Audit(ctx, admin.Scope{Namespace: "ops", Entity: "nobody"}); len(recs) != 0 {
				t.Errorf("Audit(nobody) = %+v, want none", recs)
			}
		})
	}
}

// doublingRace is the fake with a shard doubling landing just before the
// first TransactWriteItems: shard 0 of pk0's bucket gets shard count 2 and
// shard pk1 is created empty, as another replica's doubling would.
type doublingRace struct {
	*dynamotest.Fake
	pk0, pk1 string
	done     atomic.Bool
}

func (d *doublingRace) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	if !d.done.Swap(true) {
		for _, u := range []struct {
			pk, expr string
		}{{d.pk0, "SET #n = :two"}, {d.pk1, "SET #n = :two, #e = :t"}} {
			_, err := d.UpdateItem(ctx, &dynamodb.UpdateItemInput{
				TableName: aws.String("t"), Key: map[string]types.AttributeValue{"PK": &types.AttributeValueMemberS{Value: u.pk}, "SK": &types.AttributeValueMemberS{Value: "#STATE"}},
				UpdateExpression:          aws.String(u.expr),
				ExpressionAttributeNames:  map[string]string{"#n": "shard_count", "#e": "empty_start"},
				ExpressionAttributeValues: map[string]types.AttributeValue{":two": &types.AttributeValueMemberN{Value: "2"}, ":t": &types.AttributeValueMemberBOOL{Value: true}},
			})
			if err != nil {
				return nil, err
			}
		}
	}
	return d.Fake.TransactWriteItems(ctx, in, opts...)
}

// TestResetBucketRacesADoubling: a doubling that lands between the
// reset's read and its write fails the reset's conditions (nothing of it
// lands, its audit record neither); the reset reads again and refills both
// shards, the new one created empty included, with one audit record.
func TestResetBucketRacesADoubling(t *testing.T) {
	ctx := context.Background()
	d := &doublingRace{Fake: fakeTable(t), pk0: "nops/BUCKET#tenant#r#0", pk1: "nops/BUCKET#tenant#r#1"}
	c := newClock()
	s := newStore(t, d, "t", c)
	lim := mustLimit(t, 10, 24*time.Hour, 0)
	key := cascade.Key{Namespace: "ops", Entity: "tenant", Resource: "r"}
	p := &cascade.Plan{Debits: []cascade.Debit{{Key: key, Limit: "rpd", Bucket: lim, Amount: 4 * tokenbucket.PerToken}}}
	if dec, err := s.Acquire(ctx, p); err != nil || !dec.Admitted {
		t.Fatalf("Acquire() = %+v, %v", dec, err)
	}
	d.ResetCalls()
	before, reset, err := admin.New(s).ResetBucket(ctx, key, nil)
	if err != nil || !reset {
		t.Fatalf("ResetBucket() = %t, %v, want reset", reset, err)
	}
	if n := d.Calls("TransactWriteItems"); n != 2 {
		t.Errorf("TransactWriteItems calls = %d, want 2: the first failed on the doubling, the second landed", n)
	}
	if before.ShardCount != 2 {
		t.Errorf("ResetBucket() reset a bucket of %d shards, want the 2 it read again", before.ShardCount)
	}
	st, err := admin.New(s).Bucket(ctx, key, map[string]tokenbucket.Limit{"rpd": lim})
	if err != nil || st.ShardCount != 2 {
		t.Fatalf("Bucket() = %+v, %v, want 2 shards", st, err)
	}
	for _, sh := range st.Shards {
		if got := sh.Limits[0].Tokens; got != 5*tokenbucket.PerToken {
			t.Errorf("shard %d holds %d after the reset, want its share 5 000 (the new shard no longer empty)", sh.Shard, got)
		}
	}
	if recs, err := admin.New(s).Audit(ctx, admin.Scope{Namespace: "ops", Entity: "tenant"}); err != nil || len(recs) != 1 {
		t.Errorf("Audit(tenant) = %+v, %v, want one record: the failed transaction wrote none", recs, err)
	}
}
