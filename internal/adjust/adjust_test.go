package adjust_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dynalimit/dynalimit/internal/adjust"
	"github.com/dynalimit/dynalimit/internal/lease"
	"github.com/dynalimit/dynalimit/internal/metrics"
	"github.com/dynalimit/dynalimit/internal/testutil"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// settler is a fake store: it records each ID once, and fails the calls
// it is told to fail (after applying them when lost is set: an answer
// that never came back).
type settler struct {
	mu      sync.Mutex
	applied map[string]cascade.Settlement
	fail    int  // calls left to fail
	lost    bool // a failed call applied anyway
	calls   int
}

func newSettler() *settler { return &settler{applied: map[string]cascade.Settlement{}} }

func (f *settler) Settle(_ context.Context, s *cascade.Settlement) (cascade.Settled, error) {
	if err := s.Validate(); err != nil {
		return cascade.Settled{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	_, dup := f.applied[s.ID]
	if f.fail > 0 {
		f.fail--
		if f.lost && !dup {
			f.applied[s.ID] = *s
		}
		return cascade.Settled{}, errors.New("fake: no answer")
	}
	if dup {
		return cascade.Settled{Duplicate: true}, nil
	}
	f.applied[s.ID] = *s
	return cascade.Settled{Statuses: make([]cascade.Status, len(s.Debits))}, nil
}

func (f *settler) get(id string) (cascade.Settlement, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.applied[id]
	return s, ok
}

func keyring(t testing.TB) *lease.Keyring {
	k, err := lease.NewKeyring([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

var (
	bucket = must(tokenbucket.Rate(1000, time.Minute, 0))
	chain  = []cascade.Key{
		{Namespace: "default", Entity: "key-7f3a9c", Resource: "llm"},
		{Namespace: "default", Entity: "proj-payments", Resource: "llm"},
		{Namespace: "default", Entity: "tenant-acme", Resource: "llm"},
	}
)

// admitted is a three-level plan consuming est tokens of tpm and one of
// rpm on every level, all admitted.
func admitted(est int64) ([]cascade.Debit, []cascade.Status) {
	var ds []cascade.Debit
	var ss []cascade.Status
	for depth, k := range chain {
		ds = append(ds,
			cascade.Debit{Key: k, Limit: "tpm", Bucket: bucket, Amount: tokenbucket.Millitokens(est) * tokenbucket.PerToken, Op: cascade.Consume, Depth: uint8(depth)},
			cascade.Debit{Key: k, Limit: "rpm", Bucket: bucket, Amount: tokenbucket.PerToken, Op: cascade.Consume, Depth: uint8(depth)})
		ss = append(ss, cascade.Status{OK: true, Bucket: bucket, Shard: depth}, cascade.Status{OK: true, Bucket: bucket, Shard: depth})
	}
	return ds, ss
}

// tpmOnly names the adjustment of every tpm debit of ds.
func tpmOnly(ds []cascade.Debit) []adjust.Term {
	terms := make([]adjust.Term, len(ds))
	for i, d := range ds {
		if d.Limit == "tpm" {
			terms[i].Adjustment = "tpm"
		}
	}
	return terms
}

// tokens is a report of n tokens for every adjustment.
func tokens(n uint64) adjust.Cost {
	return func(string) adjust.Report { return adjust.Report{Tokens: n, Counted: true} }
}

func newAdjuster(t *testing.T, st adjust.Settler, m *metrics.Metrics, now func() time.Time) *adjust.Adjuster {
	k := keyring(t)
	a := adjust.New(adjust.Options{Settler: st, Keys: func() *lease.Keyring { return k }, Metrics: m, Now: now, TTL: time.Minute})
	t.Cleanup(a.Close)
	return a
}

func TestIssueNamesEveryLevelOfAdjustedLimits(t *testing.T) {
	a := newAdjuster(t, newSettler(), nil, nil)
	ds, ss := admitted(500)
	token, ok, err := a.Issue("llm", ds, ss, tpmOnly(ds))
	if err != nil || !ok {
		t.Fatalf("Issue = %v, %v", ok, err)
	}
	l, err := a.Open(metrics.PathAccessLog, token)
	if err != nil {
		t.Fatal(err)
	}
	if l.Domain != "llm" || len(l.Buckets) != 3 {
		t.Fatalf("lease %+v: want domain llm and 3 buckets", l)
	}
	for i, b := range l.Buckets {
		if b.Key != chain[i] || b.Shard != i || len(b.Limits) != 1 || b.Limits[0].Name != "tpm" || b.Limits[0].Estimate != 500*tokenbucket.PerToken || b.Limits[0].Bucket != bucket {
			t.Errorf("bucket %d = %+v", i, b)
		}
	}
	if _, ok, _ := a.Issue("llm", ds, ss, make([]adjust.Term, len(ds))); ok {
		t.Error("a lease was issued with no adjusted limit")
	}
}

func TestIssueLeavesOutWhatWasNotDebited(t *testing.T) {
	a := newAdjuster(t, newSettler(), nil, nil)
	ds, ss := admitted(500)
	ds[0].Op, ds[0].Amount = cascade.Check, 0 // a check: its whole cost settles later
	ss[2].OK = false                          // refused (an advisory debit): not debited
	ds[4].Op = cascade.Refund
	token, _, err := a.Issue("llm", ds, ss, tpmOnly(ds))
	if err != nil {
		t.Fatal(err)
	}
	l, err := a.Open(metrics.PathAccessLog, token)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Buckets) != 1 || l.Buckets[0].Key != chain[0] || l.Buckets[0].Limits[0].Estimate != 0 {
		t.Fatalf("lease buckets %+v: want only level 0 with an estimate of 0", l.Buckets)
	}
}

func settle(t *testing.T, a *adjust.Adjuster, token string, actual uint64) string {
	t.Helper()
	l, err := a.Open(metrics.PathAccessLog, token)
	if err != nil {
		t.Fatal(err)
	}
	res, err := a.Settle(context.Background(), metrics.PathAccessLog, l, tokens(actual))
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestSettleChargesAndRefundsTheDifference(t *testing.T) {
	for _, tc := range []struct {
		actual uint64
		op     cascade.Op
		amount tokenbucket.Millitokens
	}{
		{2000, cascade.Charge, 1500 * tokenbucket.PerToken},
		{100, cascade.Refund, 400 * tokenbucket.PerToken},
		{0, cascade.Refund, 500 * tokenbucket.PerToken},
	} {
		st := newSettler()
		a := newAdjuster(t, st, nil, nil)
		ds, ss := admitted(500)
		token, _, _ := a.Issue("llm", ds, ss, tpmOnly(ds))
		if res := settle(t, a, token, tc.actual); res != metrics.AdjustApplied {
			t.Fatalf("actual %d: result %q", tc.actual, res)
		}
		l, _ := a.Open(metrics.PathAccessLog, token)
		got, ok := st.get(l.ID)
		if !ok || len(got.Debits) != 3 {
			t.Fatalf("actual %d: settlement %+v", tc.actual, got)
		}
		for i, d := range got.Debits {
			if d.Op != tc.op || d.Amount != tc.amount || d.Key != chain[i] || d.Shard != i || d.Limit != "tpm" {
				t.Errorf("actual %d: debit %d = %+v, want %s %d", tc.actual, i, d, tc.op, tc.amount)
			}
		}
	}
}

func TestSettleOnceWhicheverPathIsFirst(t *testing.T) {
	st := newSettler()
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	a := newAdjuster(t, st, m, nil)
	ds, ss := admitted(500)
	token, _, _ := a.Issue("llm", ds, ss, tpmOnly(ds))
	l, _ := a.Open(metrics.PathStreamEnd, token)
	cost := tokens(2000)
	if res, _ := a.Settle(context.Background(), metrics.PathStreamEnd, l, cost); res != metrics.AdjustApplied {
		t.Fatalf("stream end: %q", res)
	}
	if res, _ := a.Settle(context.Background(), metrics.PathAccessLog, l, cost); res != metrics.AdjustDuplicate {
		t.Fatalf("access log after stream end: %q, want duplicate", res)
	}
	if got := value(t, reg, "ratelimit_adjustment_tokens_total", "direction", "charged"); got != 4500 {
		t.Errorf("tokens charged = %v, want 4500 (1500 on each of 3 levels)", got)
	}
}

func TestSettleWithoutCostKeepsTheEstimate(t *testing.T) {
	st := newSettler()
	a := newAdjuster(t, st, nil, nil)
	ds, ss := admitted(500)
	token, _, _ := a.Issue("llm", ds, ss, tpmOnly(ds))
	l, _ := a.Open(metrics.PathAccessLog, token)
	if _, err := a.Settle(context.Background(), metrics.PathAccessLog, l, func(string) adjust.Report { return adjust.Report{} }); !errors.Is(err, adjust.ErrNoCost) {
		t.Fatalf("Settle without cost = %v, want ErrNoCost", err)
	}
	if st.calls != 0 {
		t.Errorf("the store was called %d times for an entry without cost", st.calls)
	}
}

func TestUnansweredSettlementLandsOnce(t *testing.T) {
	st := newSettler()
	st.fail, st.lost = 2, true // applied, but neither answer came back
	a := newAdjuster(t, st, nil, nil)
	ds, ss := admitted(500)
	token, _, _ := a.Issue("llm", ds, ss, tpmOnly(ds))
	if res := settle(t, a, token, 2000); res != "" {
		t.Fatalf("result %q, want kept for a retry", res)
	}
	deadline := time.Now().Add(10 * time.Second)
	for a.Pending() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if a.Pending() != 0 {
		t.Fatal("the kept settlement never ended")
	}
	if len(st.applied) != 1 {
		t.Fatalf("%d settlements applied, want 1", len(st.applied))
	}
}

func TestKeptSettlementExpiresWithItsLease(t *testing.T) {
	st := newSettler()
	st.fail = 1 << 30
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	var mu sync.Mutex
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	a := newAdjuster(t, st, m, clock)
	ds, ss := admitted(500)
	token, _, _ := a.Issue("llm", ds, ss, tpmOnly(ds))
	settle(t, a, token, 2000)
	mu.Lock()
	now = now.Add(2 * time.Minute) // past the lease's TTL
	mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for a.Pending() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if a.Pending() != 0 {
		t.Fatal("a settlement outlived its lease")
	}
	if got := value(t, reg, "ratelimit_adjustments_total", "path", metrics.PathAccessLog, "result", metrics.AdjustFailed); got != 1 {
		t.Errorf("failed = %v, want 1", got)
	}
}

func TestOpenCountsWhatDoesNotVerify(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	a := newAdjuster(t, newSettler(), m, nil)
	if _, err := a.Open(metrics.PathAccessLog, "not-a-lease"); err == nil {
		t.Fatal("a token that is no lease verified")
	}
	if got := value(t, reg, "ratelimit_lease_verification_failures_total", "path", metrics.PathAccessLog, "reason", "malformed"); got != 1 {
		t.Errorf("malformed = %v, want 1", got)
	}
}

// value is the counter name{labels as pairs} in reg.
func value(t *testing.T, reg prometheus.Gatherer, name string, pairs ...string) float64 {
	t.Helper()
	labels := map[string]string{}
	for i := 0; i+1 < len(pairs); i += 2 {
		labels[pairs[i]] = pairs[i+1]
	}
	return testutil.CounterValue(t, reg, name, labels)
}

func must(l tokenbucket.Limit, err error) tokenbucket.Limit {
	if err != nil {
		panic(err)
	}
	return l
}

// TestKeptSettlementsAreBounded: past MaxPending settlements waiting for
// the store, one more is dropped at once and counted failed.
func TestKeptSettlementsAreBounded(t *testing.T) {
	st := newSettler()
	st.fail = 1 << 30
	reg := prometheus.NewRegistry()
	a := newAdjuster(t, st, metrics.New(reg), nil)
	ds, ss := admitted(500)
	for range adjust.MaxPending + 1 {
		token, _, _ := a.Issue("llm", ds, ss, tpmOnly(ds))
		settle(t, a, token, 2000)
	}
	if n := a.Pending(); n != adjust.MaxPending {
		t.Errorf("%d settlements kept, want %d", n, adjust.MaxPending)
	}
	if got := value(t, reg, "ratelimit_adjustments_total", "path", metrics.PathAccessLog, "result", metrics.AdjustFailed); got != 1 {
		t.Errorf("failed = %v, want 1 (the one past the bound)", got)
	}
}

// TestSettlementAfterCloseIsDropped: a settlement the store fails after
// Close (a stream-end call still answering while the service stops) is
// dropped and counted failed, never left retrying behind Close.
func TestSettlementAfterCloseIsDropped(t *testing.T) {
	st := newSettler()
	st.fail = 1 << 30
	reg := prometheus.NewRegistry()
	a := newAdjuster(t, st, metrics.New(reg), nil)
	ds, ss := admitted(500)
	token, _, _ := a.Issue("llm", ds, ss, tpmOnly(ds))
	a.Close()
	settle(t, a, token, 2000)
	if n := a.Pending(); n != 0 {
		t.Errorf("%d settlements kept after Close", n)
	}
	if got := value(t, reg, "ratelimit_adjustments_total", "path", metrics.PathAccessLog, "result", metrics.AdjustFailed); got != 1 {
		t.Errorf("failed = %v, want 1", got)
	}
}
