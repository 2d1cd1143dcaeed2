package dynamotest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// onDemand is a Fake with table "t" laid out as a new on-demand table.
func onDemand(t *testing.T) *Fake {
	f := fakeTable(t)
	p := OnDemand()
	f.SetOptions(Options{Throughput: LikeDynamoDB().Throughput, Partitions: &p})
	return f
}

// sameRange returns a partition key other than pk that hashes to pk's
// partition of a new on-demand table.
func sameRange(t *testing.T, pk string) string {
	l := newLayout(4)
	want := l.find(hashKey(pk))
	for i := range 1000 {
		if k := fmt.Sprintf("other-%d", i); k != pk && l.find(hashKey(k)) == want {
			return k
		}
	}
	t.Fatal("no key in the same partition")
	return ""
}

// TestPartitionsSplitAndIsolate: a new on-demand table has four
// partitions. One item written at 2,000 units a second, beside a cool
// item of its partition at 100, throttles both (KeyRangeThroughputExceeded)
// until adaptive capacity isolates it after 5 s; then the cool item is
// never throttled, the hot one still takes only 1,000 a second, and the
// partitions never merge.
func TestPartitionsSplitAndIsolate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := onDemand(t)
		ctx := context.Background()
		if _, err := f.UpdateItem(ctx, addOne("hot")); err != nil {
			t.Fatal(err)
		}
		if parts, splits := f.Partitions("t"); len(parts) != 4 || splits != 0 {
			t.Fatalf("a new table: %d partitions, %d splits, want 4 and 0", len(parts), splits)
		}
		cool := sameRange(t, "hot")
		var hotLate, coolThrottledEarly, coolThrottledLate int
		for i := range 40000 { // 20 s, one hot write every 0.5 ms
			_, err := f.UpdateItem(ctx, addOne("hot"))
			var te *types.ThrottlingException
			if err != nil && !(errors.As(err, &te) && strings.Contains(aws.ToString(te.ThrottlingReasons[0].Reason), "KeyRangeThroughputExceeded")) {
				t.Fatalf("hot UpdateItem() = %v", err)
			}
			if err == nil && i >= 30000 {
				hotLate++
			}
			if i%20 == 0 {
				if _, err := f.UpdateItem(ctx, addOne(cool)); err != nil && i < 8000 {
					coolThrottledEarly++
				} else if err != nil && i >= 20000 {
					coolThrottledLate++
				}
			}
			time.Sleep(500 * time.Microsecond)
		}
		parts, splits := f.Partitions("t")
		isolated := 0
		for _, p := range parts {
			if p.Isolated {
				isolated++
			}
		}
		t.Logf("%d partitions after %d splits, %d isolated; hot wrote %d in the last 5 s; cool throttled %d early, %d late", len(parts), splits, isolated, hotLate, coolThrottledEarly, coolThrottledLate)
		if isolated != 1 || len(parts) < 5 {
			t.Errorf("%d partitions, %d isolated, want the hot item isolated", len(parts), isolated)
		}
		if hotLate < 4900 || hotLate > 5100 {
			t.Errorf("isolated hot item wrote %d in 5 s, want 5,000 ± 2%%", hotLate)
		}
		if coolThrottledEarly == 0 || coolThrottledLate != 0 {
			t.Errorf("cool item throttled %d times before the split, %d after, want some and none", coolThrottledEarly, coolThrottledLate)
		}
		time.Sleep(time.Hour)
		if _, err := f.UpdateItem(ctx, addOne("hot")); err != nil {
			t.Fatal(err)
		}
		if again, _ := f.Partitions("t"); len(again) != len(parts) {
			t.Errorf("an hour idle: %d partitions, want the %d it split into (no merge)", len(again), len(parts))
		}
	})
}

// TestThrottlePartition: a partition throttled for 5 s refuses every
// write of its items meanwhile, and none after.
func TestThrottlePartition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := onDemand(t)
		ctx := context.Background()
		f.ThrottlePartition("t", "a", 5*time.Second)
		for i := range 10 {
			_, err := f.UpdateItem(ctx, addOne("a"))
			if (err != nil) != (i < 5) {
				t.Errorf("at %d s: UpdateItem() = %v", i, err)
			}
			time.Sleep(time.Second)
		}
		if c := f.Consumed(); c.Throttled != 5 || c.WriteUnits != 5 {
			t.Errorf("Consumed() = %+v, want 5 throttled, 5 write units", c)
		}
	})
}

// TestConsumedUnits: what the Fake bills is DynamoDB's: a write a unit per
// started KB of the larger image (a failed condition too), a strongly
// consistent read a unit per started 4 KB, half eventually consistent, a
// transaction twice its items' write units.
func TestConsumedUnits(t *testing.T) {
	f := fakeTable(t)
	ctx := context.Background()
	big := strings.Repeat("x", 1500) // a 1.5 KB item: 2 write units, 1 read unit
	put := &dynamodb.PutItemInput{TableName: aws.String("t"), Item: map[string]types.AttributeValue{"PK": s("a"), "SK": s("b"), "v": s(big)}}
	steps := []struct {
		name string
		call func() error
		w, r float64
	}{
		{"put 1.5 KB", func() error { _, err := f.PutItem(ctx, put); return err }, 2, 0},
		{"update it", func() error { _, err := f.UpdateItem(ctx, addOne("a")); return err }, 2, 0},
		{"consistent read", func() error {
			_, err := f.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("t"), Key: keyOfPK("a"), ConsistentRead: aws.Bool(true)})
			return err
		}, 0, 1},
		{"eventual read", func() error {
			_, err := f.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("t"), Key: keyOfPK("a")})
			return err
		}, 0, 0.5},
		{"failed condition", func() error {
			in := addOne("small")
			in.ConditionExpression = aws.String("attribute_exists(c)")
			_, err := f.UpdateItem(ctx, in)
			if err == nil {
				return errors.New("condition held")
			}
			return nil
		}, 1, 0},
		{"transaction of two small items", func() error {
			_, err := f.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{{Update: addOneIn("x")}, {Update: addOneIn("y")}}})
			return err
		}, 4, 0},
	}
	for _, st := range steps {
		before := f.Consumed()
		if err := st.call(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		got := f.Consumed()
		if w, r := got.WriteUnits-before.WriteUnits, got.ReadUnits-before.ReadUnits; w != st.w || r != st.r {
			t.Errorf("%s: billed %v write and %v read units, want %v and %v", st.name, w, r, st.w, st.r)
		}
	}
}

// TestSuffixedKeysSpread: partition keys that differ only in a suffix, as
// a bucket's shards do ("…#0" to "…#7"), land on different partitions of a
// new on-demand table, as DynamoDB's write sharding relies on: not all on
// one (FNV-64a alone puts them within a few of its primes of each other).
func TestSuffixedKeysSpread(t *testing.T) {
	l := newLayout(4)
	used := map[*hashRange]bool{}
	for sh := range 8 {
		used[l.find(hashKey(fmt.Sprintf("ndefault/BUCKET#t0#api#%d", sh)))] = true
	}
	if len(used) < 3 {
		t.Fatalf("8 shards of one bucket on %d of 4 partitions, want at least 3", len(used))
	}
}
