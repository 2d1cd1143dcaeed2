package dynamo_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/admin"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// scripted wraps the fake: once armed, the UpdateItem and GetItem calls on
// bucket items of entities named "a…" follow write and read, which get the
// item's partition key and the call's number on that item since arming
// (from 1; reads after the first write). write returns an error to answer instead of running the call,
// or lose true to run it and then answer a server error (a write that
// landed but whose answer never came back).
type scripted struct {
	dynamo.API
	mu     sync.Mutex
	armed  bool
	writes map[string]int
	reads  map[string]int
	write  func(pk string, n int) (err error, lose bool)
	read   func(pk string, n int) error
	slow   func(pk string) time.Duration // how long a's UpdateItem takes (its deadline allowing)
}

func isA(pk string) bool { return strings.Contains(pk, "/BUCKET#a") }

func (s *scripted) arm() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.armed, s.writes, s.reads = true, map[string]int{}, map[string]int{}
}

// calls returns the UpdateItem calls on pk since arming.
func (s *scripted) calls(pk string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writes[pk]
}

func (s *scripted) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	pk := pkOf(in.Key)
	var err error
	lose := false
	s.mu.Lock()
	if s.armed && isA(pk) {
		s.writes[pk]++
		if s.write != nil {
			err, lose = s.write(pk, s.writes[pk])
		}
	}
	var pause time.Duration
	if s.slow != nil && isA(pk) {
		pause = s.slow(pk)
	}
	s.mu.Unlock()
	if err := pauseCtx(ctx, pause); err != nil {
		return nil, err
	}
	if errors.Is(err, errHang) {
		// DynamoDB does not answer before the call's deadline (and the
		// write does not land).
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if err != nil {
		return nil, err
	}
	out, err := s.API.UpdateItem(ctx, in, o...)
	if err == nil && lose {
		return nil, serverError()
	}
	return out, err
}

func (s *scripted) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	pk := pkOf(in.Key)
	s.mu.Lock()
	var err error
	if s.armed && isA(pk) && s.writes[pk] > 0 {
		s.reads[pk]++
		if s.read != nil {
			err = s.read(pk, s.reads[pk])
		}
	}
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return s.API.GetItem(ctx, in, o...)
}

// errHang, from a script, makes the call hang until its deadline.
var errHang = errors.New("hang")

// giveBackEnv is a table on the fake with items a and b of one 10-token
// limit (no refill to speak of), a store s whose writes on a follow a
// script, and another replica that reads the table as it is.
type giveBackEnv struct {
	api   *scripted
	s     *dynamo.Store
	other *dynamo.Store
	obs   *countingObserver
	lim   tokenbucket.Limit
	b     cascade.Key
	clock *clock // the stores' clock
}

const giveBackTimeout = 50 * time.Millisecond

func newGiveBackEnv(t *testing.T, opts ...dynamo.Option) *giveBackEnv {
	t.Helper()
	return newGiveBackEnvTimeout(t, giveBackTimeout, opts...)
}

// newGiveBackEnvTimeout is newGiveBackEnv with s's Config.Timeout.
func newGiveBackEnvTimeout(t *testing.T, timeout time.Duration, opts ...dynamo.Option) *giveBackEnv {
	t.Helper()
	f := dynamotest.NewFake()
	if err := admin.CreateTable(context.Background(), f, "t"); err != nil {
		t.Fatalf("CreateTable() = %v", err)
	}
	// A throttled give-back would double a's shard count: let that fail,
	// so that the item stays one shard, as the refused plan found it.
	failDoublingFromOne(f)
	e := &giveBackEnv{api: &scripted{API: f}, obs: &countingObserver{}, lim: mustLimit(t, 10, time.Hour, 0), b: cascade.Key{Entity: "b", Resource: "r"}}
	c := newClock()
	e.clock = c
	e.s = newStoreCfg(t, e.api, dynamo.Config{Table: "t", Timeout: timeout, RejectionCacheSize: dynamo.RejectionCacheOff}, c,
		append([]dynamo.Option{dynamo.WithObserver(e.obs)}, opts...)...)
	e.other = newStoreCfg(t, f, dynamo.Config{Table: "t", Timeout: time.Second, RejectionCacheSize: dynamo.RejectionCacheOff}, c)
	// b is empty: every plan over a and b is refused after a's part took
	// its token.
	drain := &cascade.Plan{Debits: []cascade.Debit{{Key: e.b, Limit: "x", Bucket: e.lim, Amount: 10000}}}
	if dec, err := e.other.Acquire(context.Background(), drain); err != nil || !dec.Admitted {
		t.Fatalf("Acquire(drain b) = %+v, %v", dec, err)
	}
	return e
}

func (e *giveBackEnv) key(entity string) cascade.Key {
	return cascade.Key{Entity: entity, Resource: "r"}
}

// refuse has another replica take half of a (so that a give-back applied
// twice would show), then asks for one token of a and one of b: a's part
// takes its token (a holds 4000), b refuses, and a's token is to be given
// back (5000).
func (e *giveBackEnv) refuse(t *testing.T, a cascade.Key) {
	t.Helper()
	if err := e.refused(a); err != nil {
		t.Fatal(err)
	}
}

// refuseAll is refuse of every key at once, each in a goroutine of its own:
// in a bubble, every refused plan's give-back is then pending at the same
// instant, none yet tried in the background.
func (e *giveBackEnv) refuseAll(t *testing.T, keys []cascade.Key) {
	t.Helper()
	var wg sync.WaitGroup
	for _, a := range keys {
		wg.Go(func() {
			if err := e.refused(a); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
}

func (e *giveBackEnv) refused(a cascade.Key) error {
	half := &cascade.Plan{Debits: []cascade.Debit{{Key: a, Limit: "x", Bucket: e.lim, Amount: 5000}}}
	if dec, err := e.other.Acquire(context.Background(), half); err != nil || !dec.Admitted {
		return fmt.Errorf("Acquire(half of %s) = %+v, %w", a.Entity, dec, err)
	}
	plan := &cascade.Plan{Debits: []cascade.Debit{{Key: a, Limit: "x", Bucket: e.lim, Amount: 1000}, {Key: e.b, Limit: "x", Bucket: e.lim, Amount: 1000}}}
	if dec, err := e.s.Acquire(context.Background(), plan); err != nil || dec.Admitted {
		return fmt.Errorf("Acquire(%s and b) = %+v, %w, want refused", a.Entity, dec, err)
	}
	return nil
}

func (e *giveBackEnv) tokens(t *testing.T, k cascade.Key) tokenbucket.Millitokens {
	t.Helper()
	return tokensOf(t, e.other, e.lim, k)[0]
}

// waitFor polls cond on the bubble's clock, for up to ten minutes of it.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited ten minutes for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestGiveBackLands has the give-back of a refused two-item plan fail at
// each step, N times, then succeed: a holds exactly what one refused
// decision leaves (its token back), b stays empty, and the give-back is
// counted once, applied at once or after a background retry.
func TestGiveBackLands(t *testing.T) {
	cases := []struct {
		name  string
		write func(n int) error // a's UpdateItem n (1: the debit)
		read  func(n int) error // a's GetItem n
		want  string
	}{
		{"throttled once", func(n int) error { return failIf(n == 2, throttled()) }, nil, dynamo.GiveBackApplied},
		{"throttled 5 times", func(n int) error { return failIf(n >= 2 && n <= 6, throttled()) }, nil, dynamo.GiveBackApplied},
		// Past one batch's budget (Timeout), within the give-back's own
		// (4×Timeout): queued again at once, not left to the background.
		{"throttled 12 times", func(n int) error { return failIf(n >= 2 && n <= 13, throttled()) }, nil, dynamo.GiveBackApplied},
		{"throttled 60 times", func(n int) error { return failIf(n >= 2 && n <= 61, throttled()) }, nil, dynamo.GiveBackAppliedRetry},
		{"throttled 60 times, its first 100 reads fail", func(n int) error { return failIf(n >= 2 && n <= 61, throttled()) },
			func(n int) error { return failIf(n <= 100, serverError()) }, dynamo.GiveBackAppliedRetry},
		{"throttled 60 times, its first 100 reads throttled", func(n int) error { return failIf(n >= 2 && n <= 61, throttled()) },
			func(n int) error { return failIf(n <= 100, throttled()) }, dynamo.GiveBackAppliedRetry},
		{"throttled 60 times, reads fail now and then", func(n int) error { return failIf(n >= 2 && n <= 61, throttled()) },
			func(n int) error { return failIf(n%3 == 0, serverError()) }, dynamo.GiveBackAppliedRetry},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				e := newGiveBackEnv(t)
				a := e.key("a")
				e.api.write = func(_ string, n int) (error, bool) { return c.write(n), false }
				if c.read != nil {
					e.api.read = func(_ string, n int) error { return c.read(n) }
				}
				e.api.arm()
				e.refuse(t, a)
				waitFor(t, "the give-back to end", func() bool { return len(e.obs.givenBack()) > 0 && e.obs.pending.Load() == 0 })
				if got, want := e.obs.givenBack(), map[string]int{c.want: 1}; !maps.Equal(got, want) {
					t.Errorf("give-backs = %v, want %v", got, want)
				}
				if got := tokensOf(t, e.other, e.lim, a, e.b); got[0] != 5000 || got[1] != 0 {
					t.Errorf("tokens of a, b = %v, want [5000 0]: one refused decision", got)
				}
				// Nothing is given back twice, however long one waits.
				time.Sleep(time.Hour)
				if got := e.tokens(t, a); got != 5000 {
					t.Errorf("tokens of a an hour later = %d, want 5000", got)
				}
			})
		})
	}
}

// TestGiveBackUnknownNotRewritten has a give-back's write go unanswered, at
// once or on a background try, landed or not: it is counted unknown and
// never written again, so a holds at most what one refused decision leaves
// (4000 after the refused plan's token, 5000 when the give-back landed,
// never 6000).
func TestGiveBackUnknownNotRewritten(t *testing.T) {
	cases := []struct {
		name  string
		write func(n int) (error, bool) // a's UpdateItem n (1: the debit)
		want  tokenbucket.Millitokens   // a after the refusal
	}{
		{"the write fails with a server error", func(n int) (error, bool) { return failIf(n == 2, serverError()), false }, 4000},
		{"the write lands, its answer is lost", func(n int) (error, bool) { return nil, n == 2 }, 5000},
		{"the write hangs", func(n int) (error, bool) { return failIf(n == 2, errHang), false }, 4000},
		{"throttled into the background, then a server error", func(n int) (error, bool) {
			if n == 62 {
				return serverError(), false
			}
			return failIf(n >= 2 && n <= 61, throttled()), false
		}, 4000},
		{"throttled into the background, then it lands, its answer lost", func(n int) (error, bool) {
			return failIf(n >= 2 && n <= 61, throttled()), n == 62
		}, 5000},
		{"throttled into the background, then it hangs", func(n int) (error, bool) {
			if n == 62 {
				return errHang, false
			}
			return failIf(n >= 2 && n <= 61, throttled()), false
		}, 4000},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				e := newGiveBackEnv(t)
				a := e.key("a")
				var pk atomic.Value
				e.api.write = func(p string, n int) (error, bool) {
					pk.Store(p)
					return c.write(n)
				}
				e.api.arm()
				e.refuse(t, a)
				waitFor(t, "the give-back to end", func() bool { return len(e.obs.givenBack()) > 0 && e.obs.pending.Load() == 0 })
				if got, want := e.obs.givenBack(), map[string]int{dynamo.GiveBackUnknown: 1}; !maps.Equal(got, want) {
					t.Errorf("give-backs = %v, want %v", got, want)
				}
				calls := e.api.calls(pk.Load().(string))
				time.Sleep(time.Hour)
				if got := e.api.calls(pk.Load().(string)); got != calls {
					t.Errorf("writes of a went from %d to %d after the give-back went unanswered, want none", calls, got)
				}
				if got := e.tokens(t, a); got != c.want {
					t.Errorf("tokens of a = %d, want %d (one refused decision; never more)", got, c.want)
				}
			})
		})
	}
}

// TestGiveBackAtClose closes the store while a give-back is pending: Close
// tries it once more, and it is applied, dropped or unknown, counted so, and
// no goroutine outlives Close.
func TestGiveBackAtClose(t *testing.T) {
	cases := []struct {
		name   string
		atEnd  func() (error, bool) // a's writes once the test closes the store
		want   string
		tokens tokenbucket.Millitokens
	}{
		{"DynamoDB takes it again", func() (error, bool) { return nil, false }, dynamo.GiveBackAppliedRetry, 5000},
		{"still throttled", func() (error, bool) { return throttled(), false }, dynamo.GiveBackDroppedClosed, 4000},
		{"its answer is lost", func() (error, bool) { return nil, true }, dynamo.GiveBackUnknown, 5000},
		{"the table is gone", func() (error, bool) {
			return &types.ResourceNotFoundException{Message: new(string)}, false
		}, dynamo.GiveBackMoot, 4000},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				e := newGiveBackEnv(t)
				a := e.key("a")
				var closing atomic.Bool
				e.api.write = func(_ string, n int) (error, bool) {
					switch {
					case n == 1:
						return nil, false // the debit
					case closing.Load():
						return c.atEnd()
					}
					return throttled(), false
				}
				e.api.arm()
				e.refuse(t, a)
				waitFor(t, "a background try", func() bool { return e.obs.pending.Load() == 1 })
				time.Sleep(time.Second)
				closing.Store(true)
				if err := e.s.Close(); err != nil {
					t.Fatalf("Close() = %v", err)
				}
				if got, want := e.obs.givenBack(), map[string]int{c.want: 1}; !maps.Equal(got, want) {
					t.Errorf("give-backs = %v, want %v", got, want)
				}
				if n := e.obs.pending.Load(); n != 0 {
					t.Errorf("pending after Close = %d, want 0", n)
				}
				if got := e.tokens(t, a); got != c.tokens {
					t.Errorf("tokens of a = %d, want %d", got, c.tokens)
				}
				// A plan refused after Close began keeps nothing.
				if _, err := e.s.Acquire(context.Background(), &cascade.Plan{Debits: []cascade.Debit{{Key: a, Limit: "x", Bucket: e.lim, Amount: 1}}}); err == nil {
					t.Errorf("Acquire() after Close = nil error")
				}
			})
		})
	}
}

// TestGiveBackBoundAndAge keeps more give-backs pending than the bound
// allows, and one past its maximum age: the oldest are dropped and
// counted, the others land once DynamoDB takes them again, and every item
// holds what one refused decision leaves (its token back) or, for a
// dropped give-back, that token less.
func TestGiveBackBoundAndAge(t *testing.T) {
	cases := []struct {
		name      string
		bound     int
		maxAge    time.Duration
		plans     int
		wait      time.Duration // after the refusals, before DynamoDB takes writes again
		want      map[string]int
		pendingAt int // pending after the refusals
	}{
		{"under the bound", 8, time.Hour, 4, time.Second, map[string]int{dynamo.GiveBackAppliedRetry: 4}, 4},
		{"past the bound", 2, time.Hour, 5, time.Second, map[string]int{dynamo.GiveBackDroppedBound: 3, dynamo.GiveBackAppliedRetry: 2}, 2},
		{"past the maximum age", 8, time.Minute, 3, 2 * time.Minute, map[string]int{dynamo.GiveBackDroppedAge: 3}, 3},
		{"bound and age", 2, time.Minute, 4, 2 * time.Minute, map[string]int{dynamo.GiveBackDroppedBound: 2, dynamo.GiveBackDroppedAge: 2}, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				e := newGiveBackEnv(t, dynamo.WithGiveBackLimits(c.maxAge, c.bound))
				var down atomic.Bool
				down.Store(true)
				e.api.write = func(_ string, n int) (error, bool) {
					if n > 1 && down.Load() {
						return throttled(), false
					}
					return nil, false
				}
				e.api.arm()
				var keys []cascade.Key
				for i := range c.plans {
					k := e.key(fmt.Sprintf("a%d", i))
					keys = append(keys, k)
					e.refuse(t, k)
				}
				if n := e.obs.pending.Load(); int(n) != c.pendingAt {
					t.Errorf("pending after %d refusals = %d, want %d", c.plans, n, c.pendingAt)
				}
				e.clock.Advance(c.wait) // before the wait: the retrier sees the age while DynamoDB is down
				time.Sleep(c.wait)
				down.Store(false)
				waitFor(t, "every give-back to end", func() bool { return e.obs.pending.Load() == 0 })
				got := e.obs.givenBack()
				if !maps.Equal(got, c.want) {
					t.Errorf("give-backs = %v, want %v", got, c.want)
				}
				// The stores' clock moved by c.wait: each item refilled that much
				// (10 tokens an hour).
				refill := tokenbucket.Millitokens(int64(c.wait) * 10000 / int64(time.Hour))
				var sum tokenbucket.Millitokens
				for _, k := range keys {
					tk := e.tokens(t, k) - refill
					if tk != 4000 && tk != 5000 {
						t.Errorf("tokens of %s = %d less %d refilled, want 5000 (given back) or 4000 (dropped)", k.Entity, tk+refill, refill)
					}
					sum += tk
				}
				if want := tokenbucket.Millitokens(5000*got[dynamo.GiveBackAppliedRetry] + 4000*(c.plans-got[dynamo.GiveBackAppliedRetry])); sum != want {
					t.Errorf("tokens of the a items add up to %d, want %d", sum, want)
				}
			})
		})
	}
}

// TestGiveBackAgeReadsTheStoreClock keeps give-backs pending on a store
// whose clock is years from the wall clock: one whose store clock passes
// the maximum age is dropped although little real time passed, and one
// whose real time passes the maximum age lands while its store clock has
// not. An age read from the wall clock fails both.
func TestGiveBackAgeReadsTheStoreClock(t *testing.T) {
	cases := []struct {
		name    string
		advance time.Duration // the store's clock, after the refusal
		wait    time.Duration // real time, after the refusal
		want    string
	}{
		{"the store clock passes the age", 2 * time.Minute, time.Second, dynamo.GiveBackDroppedAge},
		{"real time passes the age", 0, 2 * time.Minute, dynamo.GiveBackAppliedRetry},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				e := newGiveBackEnv(t, dynamo.WithGiveBackLimits(time.Minute, 8))
				e.clock.Advance(-20 * 365 * 24 * time.Hour) // years before the wall clock
				var down atomic.Bool
				down.Store(true)
				e.api.write = func(_ string, n int) (error, bool) {
					if n > 1 && down.Load() {
						return throttled(), false
					}
					return nil, false
				}
				e.api.arm()
				e.refuse(t, e.key("a0"))
				if n := e.obs.pending.Load(); n != 1 {
					t.Fatalf("pending after the refusal = %d, want 1", n)
				}
				e.clock.Advance(c.advance) // before the wait, as in TestGiveBackBoundAndAge
				time.Sleep(c.wait)
				down.Store(false)
				waitFor(t, "the give-back to end", func() bool { return e.obs.pending.Load() == 0 })
				if got, want := e.obs.givenBack(), map[string]int{c.want: 1}; !maps.Equal(got, want) {
					t.Errorf("give-backs = %v, want %v", got, want)
				}
			})
		})
	}
}
