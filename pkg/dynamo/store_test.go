package dynamo_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/internal/dynamotest/rig"
	"github.com/dynalimit/dynalimit/internal/storetest"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

func TestMain(m *testing.M) { os.Exit(dynamotest.Main(m)) }

// The harness the rooms' tests share (internal/dynamotest/rig).
type clock = rig.Clock

var (
	newClock    = rig.NewClock
	backends    = rig.Backends
	newStore    = rig.NewStore
	newStoreCfg = rig.NewStoreCfg
	mustLimit   = rig.MustLimit
	inBubble    = rig.InBubble
	pkOf        = rig.PKOf
)

// TestAcquireMatchesDecide runs random plans through two store instances
// (replicas with their own caches) and through the reference model, one at
// a time, and wants the same decisions.
func TestAcquireMatchesDecide(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.Name, func(t *testing.T) {
			api, table := b.API(t)
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
			if b.Name == "local" {
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
