package dynamo_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/admin"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// TestChainFaultsKeepTokens injects a fault into every write of a
// three-level chain (key → project → tenant): the first, second or third
// UpdateItem of each level's item — the decision's parallel write, the
// write after a lost race or a give-back, a batch's retry — as a server
// error, a hang past the budget or throttling. Whatever the client sees,
// once the store is closed (give-backs drained) every level holds exactly
// what one admitted decision leaves (all levels one token down) or one
// refused decision leaves (none down): never a token lost at one level and
// kept at another. The tenant starts with one token left, so one variant
// of each case refuses at the tenant and gives back key and project.
func TestChainFaultsKeepTokens(t *testing.T) {
	// The budget of the store under test: a hang outlasts it. Wide
	// enough that its warm-up read is answered on a loaded machine under
	// -race (at 30 ms a clean clone's run ran out there).
	const timeout = 150 * time.Millisecond
	lim := mustLimit(t, 10, time.Hour, 0)
	key, proj, tenant := cascade.Key{Entity: "key-1", Resource: "r"}, cascade.Key{Entity: "proj", Resource: "r"}, cascade.Key{Entity: "acme", Resource: "r"}
	chain := func(k cascade.Key) *cascade.Plan {
		return &cascade.Plan{Debits: []cascade.Debit{
			{Key: k, Limit: "x", Bucket: lim, Amount: 1000},
			{Key: proj, Limit: "x", Bucket: lim, Amount: 1000, Depth: 1},
			{Key: tenant, Limit: "x", Bucket: lim, Amount: 1000, Depth: 2},
		}}
	}
	faults := map[string]func() error{
		"server error": serverError,
		// Answered after the call's budget: the caller has given up.
		"hang": func() error {
			time.Sleep(2 * timeout)
			return serverError()
		},
		"throttled": throttled,
	}
	for _, tenantLeft := range []int{9, 1} {
		for _, level := range []string{"key-1", "proj", "acme"} {
			for nth := 1; nth <= 3; nth++ {
				for fname, fault := range faults {
					name := fmt.Sprintf("tenant %d left/%s write %d %s", tenantLeft, level, nth, fname)
					t.Run(name, func(t *testing.T) {
						f := dynamotest.NewFake()
						if err := admin.CreateTable(context.Background(), f, "t"); err != nil {
							t.Fatal(err)
						}
						c := newClock()
						s, err := dynamo.NewStore(context.Background(), f, dynamo.Config{Table: "t", Timeout: timeout, RejectionCacheSize: dynamo.RejectionCacheOff}, dynamo.WithClock(c.Now))
						if err != nil {
							t.Fatal(err)
						}
						other := newStoreCfg(t, f, dynamo.Config{Table: "t", Timeout: time.Second, RejectionCacheSize: dynamo.RejectionCacheOff}, c)
						// Warm s on every item: key-1, proj and acme hold 9.
						if dec, err := s.Acquire(context.Background(), chain(key)); err != nil || !dec.Admitted {
							t.Fatalf("Acquire(warm) = %+v, %v", dec, err)
						}
						if tenantLeft < 9 {
							drain := &cascade.Plan{Debits: []cascade.Debit{{Key: tenant, Limit: "x", Bucket: lim, Amount: tokenbucket.Millitokens(9-tenantLeft) * 1000}}}
							if dec, err := other.Acquire(context.Background(), drain); err != nil || !dec.Admitted {
								t.Fatalf("Acquire(drain) = %+v, %v", dec, err)
							}
						}
						before := tokensOf(t, other, lim, key, proj, tenant)
						var seen atomic.Int64
						f.SetFailItem(func(op, pk string) error {
							if op == "UpdateItem" && strings.Contains(pk, "/BUCKET#"+level+"#") && seen.Add(1) == int64(nth) {
								return fault()
							}
							return nil
						})
						dec, aerr := s.Acquire(context.Background(), chain(key))
						_ = s.Close() // drains the give-backs
						f.SetFailItem(nil)
						after := tokensOf(t, other, lim, key, proj, tenant)
						if fname == "throttled" {
							// Throttling doubles the item's shards, which
							// forfeits part of its tokens (conservative):
							// each level is down by at least what an
							// admitted decision takes, never less.
							for i := range after {
								if dec.Admitted && before[i]-after[i] < 1000 {
									t.Errorf("level %d: %d → %d after an admitted decision, want at least a token down", i, before[i], after[i])
								}
							}
							return
						}
						down := -1
						for i := range after {
							d := int((before[i] - after[i]) / 1000)
							if down < 0 {
								down = d
							}
							if d != down || (d != 0 && d != 1) {
								t.Fatalf("Acquire() = %+v, %v; tokens %v → %v, want every level down by the same 0 or 1", dec, aerr, before, after)
							}
						}
						if aerr == nil && dec.Admitted != (down == 1) {
							t.Errorf("Acquire() admitted = %v but the levels went down by %d", dec.Admitted, down)
						}
					})
				}
			}
		}
	}
}
