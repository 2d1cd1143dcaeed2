package dynamo_test

import (
	"fmt"
	"maps"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// Equivalent mutants, read by internal/mutants (make mutation):
//
// mutant: CONDITIONALS_BOUNDARY giveback.go `now.Sub(p.since) >= g.maxAge` retryGiveBacks: a background try comes due at a jittered instant (giveBackBackoff), so no test can make one fall on exactly the maximum age.

// TestGiveBackBoundDropsOldest: past the bound, the oldest pending
// give-back is dropped (its item keeps the refused plan's token), and the
// newest land.
func TestGiveBackBoundDropsOldest(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		e := newGiveBackEnv(t, dynamo.WithGiveBackLimits(time.Hour, 2))
		var down atomic.Bool
		down.Store(true)
		e.api.write = func(_ string, n int) (error, bool) { return failIf(n > 1 && down.Load(), throttled()), false }
		e.api.arm()
		var keys []cascade.Key
		for i := range 3 {
			keys = append(keys, e.key(fmt.Sprintf("a%d", i)))
			e.refuse(t, keys[i])
		}
		time.Sleep(time.Second)
		down.Store(false)
		waitFor(t, "every give-back to end", func() bool { return e.obs.pending.Load() == 0 })
		want := []tokenbucket.Millitokens{4000, 5000, 5000}
		for i, k := range keys {
			if got := e.tokens(t, k); got != want[i] {
				t.Errorf("tokens of %s = %d, want %d (the oldest give-back dropped, the others applied)", k.Entity, got, want[i])
			}
		}
	})
}

// TestGiveBackDrainBudgetFollowsTimeout: Close's last try of the pending
// give-backs starts rounds of 16 for 4 × Config.Timeout, or for 250 ms when
// that is less. 120 give-backs are pending at one instant, none tried in
// the background yet, and at Close each write takes 40 ms: eight rounds
// (the last of 8), starting at 0, 40, …, 280 ms. With a Timeout of 100 ms
// (400 ms to drain) all eight land; with 50 ms (250 ms) the eighth never
// starts and its 8 are dropped, though no try of theirs failed.
func TestGiveBackDrainBudgetFollowsTimeout(t *testing.T) {
	for _, c := range []struct {
		timeout time.Duration
		want    map[string]int
	}{
		{100 * time.Millisecond, map[string]int{dynamo.GiveBackAppliedRetry: 120}},
		{50 * time.Millisecond, map[string]int{dynamo.GiveBackAppliedRetry: 112, dynamo.GiveBackDroppedClosed: 8}},
	} {
		t.Run(c.timeout.String(), func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				e := newGiveBackEnvTimeout(t, c.timeout)
				var closing atomic.Bool
				e.api.write = func(_ string, n int) (error, bool) { return failIf(n > 1 && !closing.Load(), throttled()), false }
				e.api.slow = func(string) time.Duration {
					if closing.Load() {
						return 40 * time.Millisecond
					}
					return 0
				}
				e.api.arm()
				keys := make([]cascade.Key, 120)
				for i := range keys {
					keys[i] = e.key(fmt.Sprintf("a%d", i))
				}
				e.refuseAll(t, keys)
				closing.Store(true)
				if err := e.s.Close(); err != nil {
					t.Fatalf("Close() = %v", err)
				}
				if got := e.obs.givenBack(); !maps.Equal(got, c.want) {
					t.Errorf("give-backs = %v, want %v", got, c.want)
				}
			})
		})
	}
}

// TestGiveBackDrainsMoreThanParallel: Close tries every pending give-back,
// giveBackParallel (16) at a time: of 40, the background tries in flight
// when DynamoDB takes writes again land (16 at most), the rest at Close.
func TestGiveBackDrainsMoreThanParallel(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		e := newGiveBackEnv(t)
		var closing atomic.Bool
		e.api.write = func(_ string, n int) (error, bool) { return failIf(n > 1 && !closing.Load(), throttled()), false }
		e.api.arm()
		const n = 40
		var keys []cascade.Key
		for i := range n {
			keys = append(keys, e.key(fmt.Sprintf("a%d", i)))
			e.refuse(t, keys[i])
		}
		closing.Store(true)
		if err := e.s.Close(); err != nil {
			t.Fatalf("Close() = %v", err)
		}
		if got, want := e.obs.givenBack(), map[string]int{dynamo.GiveBackAppliedRetry: n}; !maps.Equal(got, want) {
			t.Errorf("give-backs = %v, want %v", got, want)
		}
		for _, k := range keys {
			if got := e.tokens(t, k); got != 5000 {
				t.Errorf("tokens of %s = %d, want 5000 (given back at Close)", k.Entity, got)
			}
		}
	})
}
