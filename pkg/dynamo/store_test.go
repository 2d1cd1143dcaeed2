package dynamo_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/internal/storetest"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/admin"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

func TestMain(m *testing.M) { os.Exit(dynamotest.Main(m)) }

// clock is a settable test clock.
type clock struct{ ms atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ms.Store(1_700_000_000_000)
	return c
}

func (c *clock) Now() time.Time          { return time.UnixMilli(c.ms.Load()) }
func (c *clock) Advance(d time.Duration) { c.ms.Add(d.Milliseconds()) }

// backend is a table on the fake or on DynamoDB Local.
type backend struct {
	name string
	api  func(t *testing.T) (dynamo.API, string)
}

func backends() []backend {
	return []backend{
		{"fake", func(t *testing.T) (dynamo.API, string) {
			f := dynamotest.NewFake()
			if err := admin.CreateTable(context.Background(), f, "t"); err != nil {
				t.Fatalf("CreateTable(fake) = %v", err)
			}
			return f, "t"
		}},
		{"local", func(t *testing.T) (dynamo.API, string) {
			l := dynamotest.Shared(t)
			name := dynamotest.TableName(t)
			l.CreateTable(context.Background(), t, name)
			return l.Client(t), name
		}},
	}
}

func newStore(t *testing.T, api dynamo.API, table string, c *clock, opts ...dynamo.Option) *dynamo.Store {
	t.Helper()
	return newStoreCfg(t, api, dynamo.Config{Table: table, Timeout: 2 * time.Second, RejectionCacheSize: dynamo.RejectionCacheOff}, c, opts...)
}

func newStoreCfg(t *testing.T, api dynamo.API, cfg dynamo.Config, c *clock, opts ...dynamo.Option) *dynamo.Store {
	t.Helper()
	opts = append([]dynamo.Option{dynamo.WithClock(c.Now)}, opts...)
	s, err := dynamo.NewStore(context.Background(), api, cfg, opts...)
	if err != nil {
		t.Fatalf("NewStore() = %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func mustLimit(t testing.TB, n uint64, per time.Duration, burst uint64) tokenbucket.Limit {
	l, err := tokenbucket.Rate(n, per, burst)
	if err != nil {
		t.Fatalf("Rate(%d, %v, %d) = %v", n, per, burst, err)
	}
	return l
}

// TestAcquireMatchesDecide runs random plans through two store instances
// (replicas with their own caches) and through the reference model, one at
// a time, and wants the same decisions.
func TestAcquireMatchesDecide(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			api, table := b.api(t)
			c := newClock()
			// Without the rejection cache: its answers are bounds (the last
			// image this replica saw), not the reference's exact figures.
			cfg := dynamo.Config{Table: table, Timeout: 2 * time.Second, RejectionCacheSize: dynamo.RejectionCacheOff}
			stores := []*dynamo.Store{newStoreCfg(t, api, cfg, c), newStoreCfg(t, api, cfg, c)}
			limits := map[string]tokenbucket.Limit{
				"rps": mustLimit(t, 5, time.Second, 8),
				"rpm": mustLimit(t, 7, time.Minute, 0),
				"tpd": mustLimit(t, 1000, 24*time.Hour, 0),
			}
			names := []string{"rps", "rpm", "tpd"}
			keys := []cascade.Key{
				{Namespace: "a", Entity: "k1", Resource: "m"},
				{Namespace: "a", Entity: "k2", Resource: "m"},
				{Namespace: "b", Entity: "k1#m", Resource: ""},
			}
			rng := rand.New(rand.NewPCG(1, 2))
			m := storetest.NewReference(c.Now)
			steps := 400
			if b.name == "local" {
				steps = 150
			}
			for step := 0; step < steps; step++ {
				c.Advance(time.Duration(rng.IntN(400)) * time.Millisecond)
				var p cascade.Plan
				for range 1 + rng.IntN(3) {
					name := names[rng.IntN(len(names))]
					op := cascade.Op(rng.IntN(10) / 7 * (1 + rng.IntN(3))) // mostly Consume
					p.Debits = append(p.Debits, cascade.Debit{
						Key: keys[rng.IntN(len(keys))], Limit: name, Bucket: limits[name],
						Amount: tokenbucket.Millitokens(rng.IntN(3000)), Op: op, Role: cascade.Role(rng.IntN(10) / 8 * (1 + rng.IntN(2))),
					})
				}
				want, _ := m.Acquire(context.Background(), &p)
				got, err := stores[rng.IntN(2)].Acquire(context.Background(), &p)
				if err != nil {
					t.Fatalf("step %d: Acquire(%+v) error %v", step, p, err)
				}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("step %d: Acquire(%+v) = %+v, want %+v", step, p, got, want)
				}
			}
		})
	}
}
