package dynamo_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/internal/dynamotest/rig"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/admin"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

var fakeTable = rig.FakeTable

func bucketItems(f *dynamotest.Fake) []map[string]types.AttributeValue {
	var out []map[string]types.AttributeValue
	for _, it := range f.Items("t") {
		if pk, _ := it["PK"].(*types.AttributeValueMemberS); pk != nil && strings.Contains(pk.Value, "/BUCKET#") {
			out = append(out, it)
		}
	}
	return out
}

// TestItemFitsOneWriteUnit writes a bucket whose entity and resource are 256
// bytes each, every byte one that must be escaped, with two limits: the
// item stays within 1 KB, so each write costs one write unit.
func TestItemFitsOneWriteUnit(t *testing.T) {
	f := fakeTable(t)
	s := newStore(t, f, "t", newClock())
	key := cascade.Key{Entity: strings.Repeat("/", 256), Resource: strings.Repeat("é", 128)}
	rpm, tpm := mustLimit(t, 1000, time.Minute, 0), mustLimit(t, 5_000_000, time.Minute, 0)
	p := &cascade.Plan{Debits: []cascade.Debit{
		{Key: key, Limit: "requests_per_minute", Bucket: rpm, Amount: tokenbucket.PerToken},
		{Key: key, Limit: "tokens_per_minute", Bucket: tpm, Amount: 1500 * tokenbucket.PerToken},
	}}
	for range 3 {
		if dec, err := s.Acquire(context.Background(), p); err != nil || !dec.Admitted {
			t.Fatalf("Acquire() = %+v, %v", dec, err)
		}
	}
	items := bucketItems(f)
	if len(items) != 1 {
		t.Fatalf("%d bucket items, want 1", len(items))
	}
	if size := dynamotest.ItemSize(items[0]); size > 1024 {
		t.Errorf("bucket item of %d bytes, want at most 1024 (one write unit)", size)
	}
}

// TestValueTooLargeIsInvalid wants an entity beyond what the store keeps
// refused as an invalid plan, never as an outage ON_UNAVAILABLE could admit.
func TestValueTooLargeIsInvalid(t *testing.T) {
	s := newStore(t, fakeTable(t), "t", newClock())
	p := &cascade.Plan{Debits: []cascade.Debit{{Key: cascade.Key{Entity: strings.Repeat("x", dynamo.MaxValueBytes+1), Resource: "r"}, Limit: "x", Bucket: mustLimit(t, 1, time.Second, 0), Amount: 1}}}
	if _, err := s.Acquire(context.Background(), p); !errors.Is(err, cascade.ErrInvalid) || errors.Is(err, dynamo.ErrUnavailable) {
		t.Errorf("Acquire(entity of %d bytes) = %v, want an error wrapping cascade.ErrInvalid only", dynamo.MaxValueBytes+1, err)
	}
}

// TestExpiryWaitsUntilFull drains a 1,000-a-month bucket: its item must live
// until the bucket is full again (30 days), not a flat week, and after 8
// idle days the bucket admits what refill allows (266 tokens), not 1,000.
func TestExpiryWaitsUntilFull(t *testing.T) {
	f := fakeTable(t)
	c := newClock()
	s := newStore(t, f, "t", c)
	month, err := tokenbucket.Rate(1000, 30*24*time.Hour, 0)
	if err != nil {
		t.Fatal(err)
	}
	one := &cascade.Plan{Debits: []cascade.Debit{{Key: cascade.Key{Entity: "e", Resource: "r"}, Limit: "month", Bucket: month, Amount: tokenbucket.PerToken}}}
	all := &cascade.Plan{Debits: []cascade.Debit{{Key: cascade.Key{Entity: "e", Resource: "r"}, Limit: "month", Bucket: month, Amount: 1000 * tokenbucket.PerToken}}}
	if dec, err := s.Acquire(context.Background(), all); err != nil || !dec.Admitted {
		t.Fatalf("Acquire(1000) = %+v, %v", dec, err)
	}
	items := bucketItems(f)
	ttl, _ := strconv.ParseInt(items[0]["ttl"].(*types.AttributeValueMemberN).Value, 10, 64)
	if want := c.Now().Add(30 * 24 * time.Hour).Unix(); ttl < want {
		t.Errorf("ttl = %d, want at least %d (full again in 30 days)", ttl, want)
	}
	c.Advance(8 * 24 * time.Hour)
	s2 := newStore(t, f, "t", c) // a replica with no image of the bucket
	admitted := 0
	for range 1000 {
		dec, err := s2.Acquire(context.Background(), one)
		if err != nil {
			t.Fatalf("Acquire() = %v", err)
		}
		if !dec.Admitted {
			break
		}
		admitted++
	}
	if admitted != 266 {
		t.Errorf("after 8 idle days admitted %d, want 266 (1000 × 8/30, rounded down)", admitted)
	}
}

// TestRejectionCacheOff wants a negative RejectionCacheSize to ask the
// table for every decision, and zero to mean the default size (the cache
// on).
func TestRejectionCacheOff(t *testing.T) {
	for _, c := range []struct {
		size int
		on   bool
	}{{dynamo.RejectionCacheOff, false}, {-7, false}, {0, true}, {100, true}} {
		obs := &countingObserver{}
		s := newStoreCfg(t, fakeTable(t), dynamo.Config{Table: "t", Timeout: time.Second, RejectionCacheSize: c.size}, newClock(), dynamo.WithObserver(obs))
		p := &cascade.Plan{Debits: []cascade.Debit{{Key: cascade.Key{Entity: "e", Resource: "r"}, Limit: "x", Bucket: mustLimit(t, 1, time.Hour, 0), Amount: tokenbucket.PerToken}}}
		for range 5 {
			if _, err := s.Acquire(context.Background(), p); err != nil {
				t.Fatal(err)
			}
		}
		if hits := obs.hits.Load(); (hits > 0) != c.on {
			t.Errorf("RejectionCacheSize %d: %d cache hits over 4 refusals, want the cache on = %t", c.size, hits, c.on)
		}
	}
}

// TestConfigWithDefaults wants every zero field of a Config at its
// documented default, and set fields (a negative cache size too) kept.
func TestConfigWithDefaults(t *testing.T) {
	cases := []struct {
		name string
		in   dynamo.Config
		want dynamo.Config
	}{
		{"zero", dynamo.Config{Table: "t"}, dynamo.Config{
			Table: "t", Namespace: dynamo.DefaultNamespace, Timeout: dynamo.DefaultTimeout,
			ConfigCacheTTL: dynamo.DefaultConfigCacheTTL, RejectionCacheSize: dynamo.DefaultRejectionCacheSize,
			UsageRetention: dynamo.DefaultUsageRetention, ShardWriteRate: dynamo.DefaultShardWriteRate,
			ShardMergeRate: dynamo.DefaultShardMergeRate, ShardMergeAfter: dynamo.DefaultShardMergeAfter,
		}},
		{"set", dynamo.Config{Table: "t", Namespace: "team-a", Timeout: time.Second, ConfigCacheTTL: time.Minute, RejectionCacheSize: dynamo.RejectionCacheOff, UsageRetention: time.Hour, ThrottleFails: true,
			ShardWriteRate: 300, ShardMergeRate: 10, ShardMergeAfter: time.Hour},
			dynamo.Config{Table: "t", Namespace: "team-a", Timeout: time.Second, ConfigCacheTTL: time.Minute, RejectionCacheSize: dynamo.RejectionCacheOff, UsageRetention: time.Hour, ThrottleFails: true,
				ShardWriteRate: 300, ShardMergeRate: 10, ShardMergeAfter: time.Hour}},
		{"off", dynamo.Config{Table: "t", ShardWriteRate: -1, ShardMergeRate: -1}, dynamo.Config{
			Table: "t", Namespace: dynamo.DefaultNamespace, Timeout: dynamo.DefaultTimeout,
			ConfigCacheTTL: dynamo.DefaultConfigCacheTTL, RejectionCacheSize: dynamo.DefaultRejectionCacheSize,
			UsageRetention: dynamo.DefaultUsageRetention, ShardWriteRate: -1, ShardMergeRate: -1, ShardMergeAfter: dynamo.DefaultShardMergeAfter,
		}},
	}
	for _, c := range cases {
		if got := c.in.WithDefaults(); got != c.want {
			t.Errorf("%s: Config(%+v).WithDefaults() = %+v, want %+v", c.name, c.in, got, c.want)
		}
	}
}

// TestOldSchemaRefused wants a table of schema version 1 refused with a
// message that names both versions.
func TestOldSchemaRefused(t *testing.T) {
	f := dynamotest.NewFake()
	if err := admin.CreateTable(context.Background(), f, "t"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.PutItem(context.Background(), putVersion("t", "1")); err != nil {
		t.Fatal(err)
	}
	_, err := dynamo.NewStore(context.Background(), f, dynamo.Config{Table: "t"})
	if !errors.Is(err, dynamo.ErrSchema) || !strings.Contains(err.Error(), `"1"`) || !strings.Contains(err.Error(), `"2"`) {
		t.Errorf("NewStore(schema 1) = %v, want ErrSchema naming versions 1 and 2", err)
	}
}

func putVersion(table, v string) *dynamodb.PutItemInput {
	return &dynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]types.AttributeValue{
		"PK": &types.AttributeValueMemberS{Value: "_/SYSTEM#"}, "SK": &types.AttributeValueMemberS{Value: "#VERSION"},
		"schema": &types.AttributeValueMemberS{Value: v},
	}}
}

// TestUnreadableItemRefuses corrupts a bucket's level: decisions on it are
// refused (never an error that ON_UNAVAILABLE=allow would admit).
func TestUnreadableItemRefuses(t *testing.T) {
	f := fakeTable(t)
	obs := &countingObserver{}
	s := newStoreCfg(t, f, dynamo.Config{Table: "t", Timeout: 20 * time.Millisecond, RejectionCacheSize: dynamo.RejectionCacheOff}, newClock(), dynamo.WithObserver(obs))
	p := &cascade.Plan{Debits: []cascade.Debit{{Key: cascade.Key{Entity: "e", Resource: "r"}, Limit: "x", Bucket: mustLimit(t, 10, time.Second, 0), Amount: tokenbucket.PerToken}}}
	if _, err := s.Acquire(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	item := bucketItems(f)[0]
	item["b_x_x"] = &types.AttributeValueMemberN{Value: "1e500"}
	if _, err := f.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String("t"), Item: item}); err != nil {
		t.Fatal(err)
	}
	other := newStoreCfg(t, f, dynamo.Config{Table: "t", Timeout: 20 * time.Millisecond, RejectionCacheSize: dynamo.RejectionCacheOff}, newClock(), dynamo.WithObserver(obs))
	dec, err := other.Acquire(context.Background(), p)
	if err != nil || dec.Admitted {
		t.Errorf("Acquire() on an unreadable item = %+v, %v, want refused and no error", dec, err)
	}
	if obs.contended.Load() == 0 {
		t.Errorf("Contended() not called for an unreadable item")
	}
}

// TestItemTTLCoversUntouchedLimits: a write that touches one limit of an
// item keeps the item's TTL at or past the moment every other limit it
// holds is full again, so that DynamoDB never expires a bucket in use. The
// slow limit refills over 30 days, past the least TTL a write sets (a week).
func TestItemTTLCoversUntouchedLimits(t *testing.T) {
	f := fakeTable(t)
	c := newClock()
	s := newStore(t, f, "t", c)
	key := cascade.Key{Entity: "e", Resource: "r"}
	const month = 30 * 24 * time.Hour
	slow, second := mustLimit(t, 1, month, 0), mustLimit(t, 10, time.Second, 0)
	both := &cascade.Plan{Debits: []cascade.Debit{
		{Key: key, Limit: "per_month", Bucket: slow, Amount: tokenbucket.PerToken},
		{Key: key, Limit: "per_second", Bucket: second, Amount: tokenbucket.PerToken},
	}}
	if dec, err := s.Acquire(context.Background(), both); err != nil || !dec.Admitted {
		t.Fatalf("Acquire(both limits) = %+v, %v, want admitted", dec, err)
	}
	slowFullS := c.Now().Add(month).Unix() // per_month is full again a month on
	c.Advance(time.Second)
	one := &cascade.Plan{Debits: []cascade.Debit{{Key: key, Limit: "per_second", Bucket: second, Amount: tokenbucket.PerToken}}}
	if dec, err := s.Acquire(context.Background(), one); err != nil || !dec.Admitted {
		t.Fatalf("Acquire(per_second only) = %+v, %v, want admitted", dec, err)
	}
	items := bucketItems(f)
	if len(items) != 1 {
		t.Fatalf("bucket items = %d, want 1", len(items))
	}
	n, ok := items[0]["ttl"].(*types.AttributeValueMemberN)
	if !ok {
		t.Fatalf("item ttl = %#v, want a number", items[0]["ttl"])
	}
	ttl, err := strconv.ParseInt(n.Value, 10, 64)
	if err != nil || ttl < slowFullS {
		t.Errorf("item ttl after a write of per_second only = %s (%v), want at least %d (per_month full again)", n.Value, err, slowFullS)
	}
}

// TestSetShardsCounts: a bucket is pre-sharded into a power of two from 1 to
// MaxShards shards, each item living at least a week (the least TTL of a
// bucket); any other count is refused before anything is written, and a
// bucket that exists already is not pre-sharded again.
func TestSetShardsCounts(t *testing.T) {
	lim := mustLimit(t, 10, time.Second, 0)
	tests := []struct {
		name    string
		n       int
		wantErr bool
	}{
		{"zero", 0, true},
		{"one", 1, false},
		{"two", 2, false},
		{"three", 3, true},
		{"MaxShards", dynamo.MaxShards, false},
		{"MaxShards+1", dynamo.MaxShards + 1, true},
		{"twice MaxShards", 2 * dynamo.MaxShards, true},
		{"negative", -2, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := fakeTable(t)
			c := newClock()
			s := newStore(t, f, "t", c)
			key, limits := cascade.Key{Entity: "e", Resource: "r"}, map[string]tokenbucket.Limit{"rps": lim}
			err := admin.New(s).SetShards(context.Background(), key, tt.n, limits)
			if (err != nil) != tt.wantErr {
				t.Fatalf("SetShards(%d) = %v, want error %t", tt.n, err, tt.wantErr)
			}
			want := tt.n
			if tt.wantErr {
				want = 0
			}
			items := bucketItems(f)
			if len(items) != want {
				t.Errorf("after SetShards(%d), bucket items = %d, want %d", tt.n, len(items), want)
			}
			wantTTL := strconv.FormatInt(c.Now().Add(7*24*time.Hour).Unix(), 10)
			for _, it := range items {
				if n, _ := it["ttl"].(*types.AttributeValueMemberN); n == nil || n.Value != wantTTL {
					t.Errorf("after SetShards(%d), item ttl = %#v, want %s (a week on)", tt.n, it["ttl"], wantTTL)
				}
			}
			if tt.wantErr {
				return
			}
			if err := admin.New(s).SetShards(context.Background(), key, tt.n, limits); err == nil {
				t.Errorf("SetShards(%d) of a bucket that exists = nil, want an error", tt.n)
			}
		})
	}
}
