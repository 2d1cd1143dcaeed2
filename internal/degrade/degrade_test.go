package degrade_test

import (
	"context"
	"errors"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/dynalimit/dynalimit/internal/degrade"
	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/internal/metrics"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/admin"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

const token = tokenbucket.Millitokens(1000)

// slow is 100 tokens refilled at one a minute: refill does not blur counts.
var slow = tokenbucket.Limit{Capacity: 100 * token, RefillAmount: token, RefillPeriod: time.Minute}

// counts is an Observer that counts, and passes on to the metrics'.
type counts struct {
	degrade.Observer
	mu                sync.Mutex
	allowed, refused  int
	degraded, tracked int
	repaid            map[string]int
}

func (c *counts) Local(ok bool) {
	c.Observer.Local(ok)
	c.mu.Lock()
	defer c.mu.Unlock()
	if ok {
		c.allowed++
	} else {
		c.refused++
	}
}

func (c *counts) Items(d, t int) {
	c.Observer.Items(d, t)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.degraded, c.tracked = d, t
}

func (c *counts) Repaid(r string) {
	c.Observer.Repaid(r)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.repaid == nil {
		c.repaid = map[string]int{}
	}
	c.repaid[r]++
}

func (c *counts) get() (degraded int, repaid map[string]int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.degraded, maps.Clone(c.repaid)
}

// rig is a degrade.Store over a DynamoDB store on the fake, repaying in
// the background. It is made inside a synctest bubble: its clocks are the
// bubble's.
type rig struct {
	fake   *dynamotest.Fake
	shared *dynamo.Store
	store  *degrade.Store
	obs    *counts
	reg    *prometheus.Registry
	log    *logtest.Hook
	// stop ends Run and returns when it has, its last pass made.
	stop func()
}

// newRig returns a rig of one replica of a fleet of share, its
// degrade.Config changed by opts.
func newRig(t *testing.T, share int, opts ...func(*degrade.Config)) *rig {
	t.Helper()
	ctx := context.Background()
	f := dynamotest.NewFake()
	if err := admin.CreateTable(ctx, f, "t"); err != nil {
		t.Fatal(err)
	}
	shared, err := dynamo.NewStore(ctx, f, dynamo.Config{Table: "t", Timeout: 50 * time.Millisecond, ThrottleFails: true})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	obs := &counts{Observer: metrics.DegradeObserver(reg)}
	logger, hook := logtest.NewNullLogger()
	cfg := degrade.Config{ID: "r1", Share: func() int { return share }, Observer: obs, Log: logrus.NewEntry(logger)}
	for _, o := range opts {
		o(&cfg)
	}
	d := degrade.New(shared, cfg)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = d.Run(runCtx); close(done) }()
	stop := func() {
		cancel()
		<-done
	}
	t.Cleanup(func() {
		stop()
		_ = shared.Close()
	})
	return &rig{fake: f, shared: shared, store: d, obs: obs, reg: reg, log: hook, stop: stop}
}

// outage makes d's shared store's failures an outage: a call to it fails
// (a check of an item of its own, decided locally: nothing owed), and a second passes, every
// call in between failing as well. Local buckets with no image then start
// full at their share.
func outage(t *testing.T, d *degrade.Store) {
	t.Helper()
	check := one("outage")
	check.Debits[0].Op, check.Debits[0].Amount = cascade.Check, 0 // owes nothing
	if dec, err := d.Acquire(context.Background(), check); err != nil || !dec.Local {
		t.Fatalf("the first failed call: %+v, %v; want a local decision", dec, err)
	}
	time.Sleep(time.Second)
}

func key(entity string) cascade.Key { return cascade.Key{Entity: entity, Resource: "api"} }

func one(entity string) *cascade.Plan {
	return &cascade.Plan{Debits: []cascade.Debit{{Key: key(entity), Limit: "l", Bucket: slow, Amount: token}}}
}

// tokens is what the shared item of entity holds now.
func (r *rig) tokens(t *testing.T, entity string) tokenbucket.Millitokens {
	t.Helper()
	st, err := admin.New(r.shared).Status(context.Background(), key(entity), map[string]tokenbucket.Limit{"l": slow})
	if err != nil {
		t.Fatal(err)
	}
	return st["l"].Remaining
}

// decide asks n times, and returns how many were admitted and how many
// decided locally.
func (r *rig) decide(t *testing.T, p *cascade.Plan, n int) (admitted, local int) {
	t.Helper()
	for range n {
		dec, err := r.store.Acquire(context.Background(), p)
		if err != nil {
			t.Fatalf("Acquire: %v", err)
		}
		if dec.Admitted {
			admitted++
		}
		if dec.Local {
			local++
		}
	}
	return admitted, local
}

// repaid lets the bubble's clock run 5 s, and fails t unless no item is
// degraded then and every debt is repaid.
func (r *rig) repaid(t *testing.T) {
	t.Helper()
	time.Sleep(5 * time.Second)
	synctest.Wait()
	if d, s := r.obs.get(); d != 0 || r.store.Owes() {
		t.Fatalf("still %d degraded, owing %v (repayments %v) after 5 s", d, r.store.Owes(), s)
	}
}

func unanswered() error { return &types.InternalServerError{Message: new(string)} }

// TestOutageLocalShareThenRepay: while every call fails, a replica of
// three decides on a third of what it last saw of the bucket; when calls
// answer again, the shared item is charged what was admitted locally, once.
func TestOutageLocalShareThenRepay(t *testing.T) { synctest.Test(t, testOutageLocalShareThenRepay) }

func testOutageLocalShareThenRepay(t *testing.T) {
	r := newRig(t, 3)
	if ok, local := r.decide(t, one("a"), 10); ok != 10 || local != 0 {
		t.Fatalf("before the outage: %d admitted, %d local; want 10 by the store", ok, local)
	}
	r.fake.SetFail(func(context.Context, string) error { return unanswered() })
	outage(t, r.store)
	ok, local := r.decide(t, one("a"), 60)
	if local != 60 {
		t.Errorf("during the outage %d of 60 decided locally, want all", local)
	}
	if !r.store.DecidedLocally(key("a")) || r.store.DecidedLocally(key("b")) {
		t.Errorf("during the outage DecidedLocally(a, b) = %t, %t; want true, false", r.store.DecidedLocally(key("a")), r.store.DecidedLocally(key("b")))
	}
	// It last saw 90 tokens: a third of that is this replica's.
	if ok != 30 {
		t.Errorf("during the outage %d admitted, want 30 (90 seen / 3 replicas)", ok)
	}
	r.fake.SetFail(nil)
	r.repaid(t)
	if r.store.DecidedLocally(key("a")) {
		t.Errorf("after repaying DecidedLocally(a) = true, want false: back on the shared store")
	}
	// The first decision of the outage went to DynamoDB, unanswered: it
	// may have landed, so it is counted there or nowhere, never twice.
	want := tokenbucket.Millitokens(90-ok) * token
	if got := r.tokens(t, "a"); got > want+token+token/2 || got < want {
		t.Errorf("after repaying the item holds %d, want %d to %d (100 − 10 − %d admitted locally, the unanswered one perhaps not)", got, want, want+token, ok)
	}
	if _, s := r.obs.get(); s[degrade.RepayApplied] < 1 || s[degrade.RepayDuplicate] > 0 {
		t.Errorf("repayments %v, want applied and no duplicate", s)
	}
	if ok, local := r.decide(t, one("a"), 1); ok != 1 || local != 0 {
		t.Errorf("after the outage: %d admitted, %d local; want the store's admission", ok, local)
	}
}

// TestNoImageStartsBare: a bucket this replica never saw, failed while
// the shared store answers this replica's other calls (a slow call, not
// an outage), starts bare: holding the one request that made it, as the
// shared bucket may be giving its burst to the replicas it answers, so
// only the refill is this replica's. Once the store has failed every call
// for a second (an outage: nobody is admitting there), a new bucket starts
// full at its share. A bucket seen before starts bare too while the store
// answers, and is lifted to its share of what was seen in an outage.
func TestNoImageStartsBare(t *testing.T) { synctest.Test(t, testNoImageStartsBare) }

func testNoImageStartsBare(t *testing.T) {
	r := newRig(t, 2)
	if ok, _ := r.decide(t, one("seen"), 1); ok != 1 {
		t.Fatal("the store did not admit")
	}
	var cold atomic.Bool
	cold.Store(true)
	r.fake.SetFailItem(func(_, pk string) error {
		if cold.Load() && strings.Contains(pk, "#cold#") {
			return unanswered()
		}
		return nil
	})
	if ok, local := r.decide(t, one("cold"), 5); ok != 1 || local != 5 {
		t.Errorf("a slow call on a bucket never seen: %d of 5 admitted, %d local; want 1 (the request that made it) and 5 local", ok, local)
	}
	if ok, local := r.decide(t, one("seen"), 1); ok != 1 || local != 0 {
		t.Errorf("another bucket meanwhile: %d admitted, %d local; want the store's admission", ok, local)
	}
	// A bucket seen holding 98 tokens starts bare as well while the store
	// answers: what this replica saw may be going to the others now.
	slow := func(entity string) func(string, string) error {
		return func(_, pk string) error {
			if strings.Contains(pk, "#"+entity+"#") || (cold.Load() && strings.Contains(pk, "#cold#")) {
				return unanswered()
			}
			return nil
		}
	}
	r.fake.SetFailItem(slow("seen"))
	if ok, local := r.decide(t, one("seen"), 5); ok != 1 || local != 5 {
		t.Errorf("a slow call on a bucket seen with 98 tokens: %d of 5 admitted, %d local; want 1 and 5 local", ok, local)
	}
	r.fake.SetFail(func(context.Context, string) error { return unanswered() })
	outage(t, r.store)
	if ok, local := r.decide(t, one("new"), 60); ok != 50 || local != 60 {
		t.Errorf("in an outage, a bucket never seen: %d of 60 admitted, %d local; want 50 (full at half of 100)", ok, local)
	}
	// Once it is an outage the bare bucket is lifted to its share of what
	// was seen: half of 98 (what it holds now, 0 plus a second's refill,
	// being less).
	if ok, local := r.decide(t, one("seen"), 60); ok != 49 || local != 60 {
		t.Errorf("in an outage, the bucket seen with 98: %d of 60 admitted, %d local; want 49 (half of 98)", ok, local)
	}
	r.fake.SetFail(nil)
	r.fake.SetFailItem(nil)
	r.repaid(t)
}

// TestThrottledItemAlone: an item DynamoDB keeps throttling is decided
// locally while other items keep going to DynamoDB, and goes back to
// DynamoDB within a second of the throttling ending.
func TestThrottledItemAlone(t *testing.T) { synctest.Test(t, testThrottledItemAlone) }

func testThrottledItemAlone(t *testing.T) {
	r := newRig(t, 1)
	began := time.Now()
	var throttled atomic.Bool
	// Decided once by the store first. While DynamoDB answers other
	// calls, the local bucket starts bare all the same: the item may be
	// giving what this replica last saw of it to other replicas.
	if ok, local := r.decide(t, one("hot"), 1); ok != 1 || local != 0 {
		t.Fatalf("before the throttling: %d admitted, %d local; want the store's admission", ok, local)
	}
	throttled.Store(true)
	r.fake.SetFailItem(func(op, pk string) error {
		if throttled.Load() && strings.Contains(pk, "#hot#") {
			return &types.ProvisionedThroughputExceededException{Message: new(string)}
		}
		return nil
	})
	if ok, local := r.decide(t, one("hot"), 3); local != 3 || ok != 1 {
		t.Errorf("throttled item: %d of 3 decided locally, %d admitted; want 3, and 1 (a bare bucket)", local, ok)
	}
	if _, local := r.decide(t, one("cold"), 3); local != 0 {
		t.Errorf("another item: %d of 3 decided locally, want none", local)
	}
	throttled.Store(false)
	end := time.Now()
	for {
		if _, local := r.decide(t, one("hot"), 1); local == 0 {
			break
		}
		if time.Since(end) > time.Second {
			t.Fatalf("throttled item still decided locally %v after the throttling ended", time.Since(end))
		}
		time.Sleep(5 * time.Millisecond)
		synctest.Wait()
	}
	t.Logf("back to DynamoDB %v after the throttling ended", time.Since(end).Round(time.Millisecond))
	r.repaid(t)
	// 1 local admission repaid, 2 by the store: at most 97 tokens and
	// the refill since remain. (Throttling tries to double the item's
	// shards; DynamoDB throttles the doubling's writes too, and a doubling
	// that landed would forfeit tokens, never add any.)
	refill := tokenbucket.Millitokens(time.Since(began) * time.Duration(token) / time.Minute)
	if got := r.tokens(t, "hot"); got > 97*token+refill {
		t.Errorf("hot holds %d, want at most 97 tokens and the %d refilled", got, refill)
	}
}

// TestUnknownOutcomeCountedOnce: a write that landed but went unanswered
// is answered locally and not charged again when repaying; one that did
// not land is charged by the repayment.
func TestUnknownOutcomeCountedOnce(t *testing.T) {
	t.Run("landed", func(t *testing.T) { synctest.Test(t, func(t *testing.T) { testUnknownOutcome(t, true) }) })
	t.Run("not landed", func(t *testing.T) { synctest.Test(t, func(t *testing.T) { testUnknownOutcome(t, false) }) })
}

func testUnknownOutcome(t *testing.T, landed bool) {
	r := newRig(t, 1)
	var once atomic.Bool
	fault := func(pk string) error {
		if strings.Contains(pk, "/BUCKET#") && once.CompareAndSwap(false, true) {
			return unanswered()
		}
		return nil
	}
	if landed {
		// Decided once by the store first: the local bucket starts from
		// its image, and the write whose answer is lost is the item's.
		if ok, local := r.decide(t, one("u"), 1); ok != 1 || local != 0 {
			t.Fatalf("before the fault: %d admitted, %d local; want the store's admission", ok, local)
		}
		r.fake.SetLostItem(fault)
	} else {
		// A read that failed says nothing: with no image, the local
		// bucket starts full only in an outage.
		r.fake.SetFail(func(context.Context, string) error { return unanswered() })
		outage(t, r.store)
		r.fake.SetFail(nil)
		r.fake.SetFailItem(func(_, pk string) error { return fault(pk) })
	}
	ok, local := r.decide(t, one("u"), 1)
	if ok != 1 || local != 1 {
		t.Fatalf("%d admitted, %d local; want 1 admitted locally", ok, local)
	}
	r.repaid(t)
	want := 99 * token
	if landed {
		want = 98 * token // the first decision too
	}
	if got := r.tokens(t, "u"); got > want+token/2 || got < want {
		t.Errorf("the item holds %d, want %d: the request counted once", got, want)
	}
}

// TestRecentRefusalStands: a level the shared store refused within the
// last second refuses locally, whatever the other level holds.
func TestRecentRefusalStands(t *testing.T) { synctest.Test(t, testRecentRefusalStands) }

func testRecentRefusalStands(t *testing.T) {
	r := newRig(t, 1)
	tiny := tokenbucket.Limit{Capacity: token, RefillAmount: token, RefillPeriod: time.Minute}
	plan := func(k string) *cascade.Plan {
		return &cascade.Plan{Debits: []cascade.Debit{
			{Key: key(k), Limit: "l", Bucket: slow, Amount: token},
			{Key: key("tenant"), Limit: "l", Bucket: tiny, Amount: token, Depth: 1},
		}}
	}
	if ok, _ := r.decide(t, plan("k1"), 2); ok != 1 {
		t.Fatalf("%d admitted, want 1 (the tenant holds one)", ok)
	}
	r.fake.SetFail(func(context.Context, string) error { return unanswered() })
	dec, err := r.store.Acquire(context.Background(), plan("k2"))
	if err != nil || !dec.Local || dec.Admitted {
		t.Fatalf("during the outage, after the tenant refused: %+v, %v; want a local refusal", dec, err)
	}
	if dec.Statuses[1].RetryAfter <= 0 {
		t.Errorf("tenant status %+v, want a retry-after", dec.Statuses[1])
	}
	r.fake.SetFail(nil)
}

// TestBoundedItems: past MaxItems a plan that needs another item is
// refused, never admitted unlimited.
func TestBoundedItems(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := degrade.New(failing{}, degrade.Config{ID: "r", MaxItems: 3})
		outage(t, d) // tracks a third item
		for i, want := range []bool{true, true, false} {
			dec, err := d.Acquire(context.Background(), one(string(rune('a'+i))))
			if err != nil || dec.Admitted != want || !dec.Local {
				t.Errorf("item %d: %+v, %v; want local, admitted %v", i, dec, err, want)
			}
		}
	})
}

// failing is a shared store that never answers.
type failing struct{}

var errDown = errors.New("down")

func (failing) Acquire(context.Context, *cascade.Plan) (cascade.Decision, error) {
	return cascade.Decision{}, errDown
}

func (failing) Repay(context.Context, *cascade.Repayment) (cascade.Settled, error) {
	return cascade.Settled{}, errDown
}

// TestAnswerSendsBackedOffRepayments: an item whose repayments failed
// waits on a backoff (up to Config.MaxProbe); an answer of the shared store
// to another call sends its repayment at once, so that it comes back as
// soon as the store does.
func TestAnswerSendsBackedOffRepayments(t *testing.T) {
	synctest.Test(t, testAnswerSendsBackedOffRepayments)
}

func testAnswerSendsBackedOffRepayments(t *testing.T) {
	r := newRig(t, 3)
	var down atomic.Bool
	down.Store(true)
	r.fake.SetFailItem(func(_, pk string) error {
		if down.Load() && strings.Contains(pk, "BUCKET#a#") {
			return unanswered()
		}
		return nil
	})
	if _, local := r.decide(t, one("a"), 5); local != 5 {
		t.Fatalf("%d of 5 decided locally while a's item fails, want all", local)
	}
	time.Sleep(2 * time.Second) // repayments fail; the backoff reaches its most
	synctest.Wait()
	down.Store(false)
	time.Sleep(10 * time.Millisecond) // less than any backoff
	synctest.Wait()
	if _, local := r.decide(t, one("a"), 1); local != 1 {
		t.Fatal("a came back before any answer: the test shows nothing")
	}
	if _, local := r.decide(t, one("b"), 1); local != 0 { // the store answers
		t.Fatal("b decided locally")
	}
	time.Sleep(time.Millisecond)
	synctest.Wait()
	if _, local := r.decide(t, one("a"), 1); local != 0 {
		t.Errorf("a still decided locally 1 ms after the store answered, want it back: its repayment waited on its backoff")
	}
}
