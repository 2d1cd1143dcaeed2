package degrade_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"

	"github.com/dynalimit/dynalimit/internal/degrade"
	"github.com/dynalimit/dynalimit/internal/metrics"
	"github.com/dynalimit/dynalimit/pkg/cascade"
)

// TestStopRepaysWithDynamoDBBack: a replica told to stop while it owes what
// it decided locally, DynamoDB answering again as it stops, repays its
// debts in its last pass: the table holds them, and nothing is lost.
func TestStopRepaysWithDynamoDBBack(t *testing.T) { synctest.Test(t, testStopRepays) }

func testStopRepays(t *testing.T) {
	r := newRig(t, 1)
	var back atomic.Bool
	r.fake.SetFail(func(context.Context, string) error {
		if back.Load() {
			return nil
		}
		return unanswered()
	})
	outage(t, r.store)
	ok, local := r.decide(t, one("a"), 20)
	if ok != 20 || local != 20 {
		t.Fatalf("during the outage %d admitted, %d local; want 20 admitted locally", ok, local)
	}
	time.Sleep(2 * time.Second) // repayments fail meanwhile
	synctest.Wait()
	if _, s := r.obs.get(); !r.store.Owes() || s[degrade.RepayApplied] != 0 || s[degrade.RepayFailed] == 0 {
		t.Fatalf("before the stop: owes %v, repayments %v; want owing, every repayment failed", r.store.Owes(), s)
	}
	// Owed beyond the repayment that may be in flight (the DynamoDB store
	// tries one for a second): only the last pass can repay these, as the
	// bubble's clock stands still until the stop.
	if ok, _ := r.decide(t, one("a"), 5); ok != 5 {
		t.Fatalf("%d admitted, want 5", ok)
	}
	back.Store(true)
	r.stop()
	if r.store.Owes() {
		t.Error("after the stop the replica still owes")
	}
	if got, want := r.tokens(t, "a"), 75*token; got < want || got > want+token/10 {
		t.Errorf("the table's item holds %d, want %d (100 − 25 admitted locally, repaid at the stop)", got, want)
	}
	if _, s := r.obs.get(); s[degrade.RepayApplied] < 1 {
		t.Errorf("repayments %v, want applied", s)
	}
	if tokens, decisions := lost(t, r.reg); tokens != 0 || decisions != 0 {
		t.Errorf("lost %v tokens over %v decisions, want none", tokens, decisions)
	}
	if e := r.log.LastEntry(); len(r.log.AllEntries()) != 1 || e.Level != logrus.InfoLevel || e.Data["items"] != 1 {
		t.Errorf("log %v, want one line: 1 item repaid at the stop", r.log.AllEntries())
	}
}

// TestStopWithDynamoDBDownCountsTheLoss: a replica stopped while DynamoDB
// still does not answer counts what it owed as lost, in tokens and in
// decisions (once per item a decision debited), and says so in one line.
func TestStopWithDynamoDBDownCountsTheLoss(t *testing.T) {
	synctest.Test(t, testStopCountsTheLoss)
}

func testStopCountsTheLoss(t *testing.T) {
	r := newRig(t, 1)
	r.fake.SetFail(func(context.Context, string) error { return unanswered() })
	outage(t, r.store)
	ok, _ := r.decide(t, one("a"), 20)
	// Two levels: each decision owes a token to both items.
	two := &cascade.Plan{Debits: []cascade.Debit{
		{Key: key("b"), Limit: "l", Bucket: slow, Amount: token},
		{Key: key("tenant"), Limit: "l", Bucket: slow, Amount: token, Depth: 1},
	}}
	ok2, _ := r.decide(t, two, 5)
	if ok != 20 || ok2 != 5 {
		t.Fatalf("%d and %d admitted, want 20 and 5", ok, ok2)
	}
	time.Sleep(time.Second)
	synctest.Wait()
	start := time.Now()
	r.stop()
	took := time.Since(start)
	tokens, decisions := lost(t, r.reg)
	if tokens != 30 || decisions != 30 {
		t.Errorf("lost %v tokens over %v decisions, want 30 over 30 (20 on a, 5 on b, 5 on tenant)", tokens, decisions)
	}
	// A repayment in flight at the stop, then two tries of at most
	// a second each (the DynamoDB store's budget for charges).
	if took > 3500*time.Millisecond {
		t.Errorf("the stop took %v, want at most 3.5 s", took)
	}
	t.Logf("the stop took %v with DynamoDB down", took)
	var warned []*logrus.Entry
	for _, e := range r.log.AllEntries() {
		if e.Level == logrus.WarnLevel {
			warned = append(warned, e)
		}
	}
	if len(warned) != 1 || warned[0].Data["lost_tokens"] != 30.0 || warned[0].Data["lost_decisions"] != 30 || warned[0].Data["lost_items"] != 3 {
		t.Errorf("warnings %v, want one line with the totals: 30 tokens, 30 decisions, 3 items", warned)
	}
	if r.store.Owes() {
		t.Error("after the stop the replica still owes what it counted lost")
	}
}

// TestLastPassWithinDrain: a shared store that never answers holds Run's
// last pass for Config.Drain, no longer; what it owed is lost.
func TestLastPassWithinDrain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewRegistry()
		d := degrade.New(hanging{}, degrade.Config{ID: "r", Drain: 1500 * time.Millisecond, Observer: metrics.DegradeObserver(reg)})
		outage(t, d)
		for range 3 {
			if dec, err := d.Acquire(context.Background(), one("a")); err != nil || !dec.Admitted {
				t.Fatalf("%+v, %v; want admitted locally", dec, err)
			}
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		start := time.Now()
		_ = d.Run(ctx)
		if took := time.Since(start); took != 1500*time.Millisecond {
			t.Errorf("Run returned %v after its context ended, want Drain: 1.5s", took)
		}
		if tokens, decisions := lost(t, reg); tokens != 3 || decisions != 3 {
			t.Errorf("lost %v tokens over %v decisions, want 3 over 3", tokens, decisions)
		}
	})
}

// TestDroppedRepaymentIsLost: a repayment the shared store refuses as
// invalid is dropped, not retried, and what it carried is counted lost.
func TestDroppedRepaymentIsLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewRegistry()
		d := degrade.New(refusing{}, degrade.Config{ID: "r", Observer: metrics.DegradeObserver(reg)})
		outage(t, d)
		for range 2 {
			if dec, err := d.Acquire(context.Background(), one("a")); err != nil || !dec.Admitted {
				t.Fatalf("%+v, %v; want admitted locally", dec, err)
			}
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { _ = d.Run(ctx); close(done) }()
		time.Sleep(time.Second)
		synctest.Wait()
		if tokens, decisions := lost(t, reg); tokens != 2 || decisions != 2 || d.Owes() {
			t.Errorf("lost %v tokens over %v decisions, owing %v; want 2 over 2 dropped, nothing owed", tokens, decisions, d.Owes())
		}
		cancel()
		<-done
	})
}

// refusing is a shared store that is down and refuses every repayment as
// invalid.
type refusing struct{ hanging }

func (refusing) Repay(context.Context, *cascade.Repayment) (cascade.Settled, error) {
	return cascade.Settled{}, fmt.Errorf("refused: %w", cascade.ErrInvalid)
}

// hanging is a shared store that is down: it fails decisions at once and
// leaves repayments unanswered until their context ends.
type hanging struct{}

func (hanging) Acquire(context.Context, *cascade.Plan) (cascade.Decision, error) {
	return cascade.Decision{}, errDown
}

func (hanging) Repay(ctx context.Context, _ *cascade.Repayment) (cascade.Settled, error) {
	<-ctx.Done()
	return cascade.Settled{}, ctx.Err()
}

// lost reads ratelimit_degraded_debt_lost_total from reg.
func lost(t *testing.T, reg *prometheus.Registry) (tokens, decisions float64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "ratelimit_degraded_debt_lost_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				switch {
				case l.GetName() != "unit":
				case l.GetValue() == "tokens":
					tokens = m.GetCounter().GetValue()
				case l.GetValue() == "decisions":
					decisions = m.GetCounter().GetValue()
				}
			}
		}
	}
	return tokens, decisions
}
