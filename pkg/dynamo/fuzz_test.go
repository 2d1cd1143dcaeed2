package dynamo_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/internal/storetest"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/admin"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// FuzzAcquire drives two replicas on the fake table and the reference store
// (cascade.Decide over levels held in memory) with the same plans at the same
// instants, and wants the same decisions and the same tokens left in every
// bucket: the conditional writes store exactly what Decide decided, whatever
// the image each replica held.
func FuzzAcquire(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})
	f.Add([]byte{255, 0, 255, 0, 7, 7, 7, 7, 200, 100, 50, 25, 12, 6, 3, 1, 9, 9, 9, 9})
	f.Add([]byte("consume refund charge check quota advisory"))
	f.Fuzz(func(t *testing.T, data []byte) { acquireAgainstReference(t, data) })
}

// TestAcquireAgainstReferenceRandom runs FuzzAcquire's comparison on random
// inputs, each within a second: a decision on the fake (one caller at a
// time) never waits out a budget.
func TestAcquireAgainstReferenceRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	for i := range 300 {
		data := make([]byte, 8+rng.IntN(300))
		for j := range data {
			data[j] = byte(rng.IntN(256))
		}
		start := time.Now()
		acquireAgainstReference(t, data)
		if d := time.Since(start); d > time.Second {
			t.Fatalf("input %d (%x) took %v", i, data, d)
		}
	}
}

func acquireAgainstReference(t *testing.T, data []byte) {
	limits := []tokenbucket.Limit{
		{Capacity: 5000, RefillAmount: 1000, RefillPeriod: time.Second},
		{Capacity: 3000, RefillAmount: 7, RefillPeriod: 3 * time.Millisecond},
		{Capacity: 100_000, RefillAmount: 100_000, RefillPeriod: time.Hour},
	}
	keys := []cascade.Key{{Entity: "a", Resource: "r"}, {Entity: "b", Resource: "r"}, {Namespace: "n", Entity: "a", Resource: "r"}, {Entity: "p", Resource: "r"}, {Entity: "t", Resource: "r"}}
	{
		fake := dynamotest.NewFake()
		if err := admin.CreateTable(context.Background(), fake, "t"); err != nil {
			t.Fatal(err)
		}
		c := newClock()
		cfg := dynamo.Config{Table: "t", Timeout: time.Second, RejectionCacheSize: dynamo.RejectionCacheOff}
		replicas := []*dynamo.Store{newStoreCfg(t, fake, cfg, c), newStoreCfg(t, fake, cfg, c)}
		ref := storetest.NewReference(c.Now)
		next := func() byte {
			if len(data) == 0 {
				return 0
			}
			b := data[0]
			data = data[1:]
			return b
		}
		for step := 0; len(data) > 0 && step < 64; step++ {
			c.Advance(time.Duration(next()) * 7 * time.Millisecond)
			var p cascade.Plan
			extra := 1 + int(next()%3) // debits besides a chain
			if b := next(); b >= 192 {
				// A descriptor's chain, as the service plans a cascading
				// rule: its own bucket (a or b), then the parents p and t
				// that every chain shares, one op and role for all.
				amount, op, role := tokenbucket.Millitokens(next())*37, cascade.Op(next()%4), cascade.Role(next()%3)
				chain := []cascade.Key{keys[int(b)%2], {Entity: "p", Resource: "r"}, {Entity: "t", Resource: "r"}}
				for depth, k := range chain[:1+int(b/2)%3] {
					li := (int(b) + depth) % 3
					p.Debits = append(p.Debits, cascade.Debit{
						Key: k, Limit: fmt.Sprint("l", li), Bucket: limits[li],
						Amount: amount, Op: op, Role: role, Depth: uint8(depth),
					})
				}
				extra--
			}
			for range extra {
				b := next()
				li := int(b % 3)
				p.Debits = append(p.Debits, cascade.Debit{
					Key: keys[int(b/3)%len(keys)], Limit: fmt.Sprint("l", li), Bucket: limits[li],
					Amount: tokenbucket.Millitokens(next()) * 37, Op: cascade.Op(next() % 4), Role: cascade.Role(next() % 3),
				})
			}
			want, _ := ref.Acquire(context.Background(), &p)
			got, err := replicas[step%2].Acquire(context.Background(), &p)
			if err != nil {
				t.Fatalf("step %d: Acquire(%+v) error %v", step, p, err)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("step %d: Acquire(%+v) =\n%+v, want\n%+v", step, p, got, want)
			}
			for _, k := range keys {
				for li, l := range limits {
					name := fmt.Sprint("l", li)
					wantTk, ok := ref.Tokens(func(kk cascade.Key, n string) bool { return kk == k && n == name })
					if !ok {
						continue
					}
					st, err := admin.New(replicas[0]).Status(context.Background(), k, map[string]tokenbucket.Limit{name: l})
					if err != nil {
						t.Fatal(err)
					}
					if st[name].Remaining != wantTk {
						t.Fatalf("step %d: bucket %v %s holds %d, want %d", step, k, name, st[name].Remaining, wantTk)
					}
				}
			}
		}
	}
}
