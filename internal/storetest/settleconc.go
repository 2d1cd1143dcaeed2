package storetest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// Settlement concurrency parameters: settleGoroutines settle one ID at
// once; on the hot bucket, hotSettlers settle hotSettles IDs each (every
// one twice) while as many goroutines consume hotConsumes times each.
const (
	settleGoroutines = 16
	hotSettlers      = 8
	hotSettles       = 40
	hotConsumes      = 50
)

// RunSettleConcurrency runs the settlement concurrency tests on the real
// clock. f returns one or more store instances that share one fresh, empty
// state (several replicas of one table for DynamoDB); goroutines are
// spread across them. f is called once per subtest.
func RunSettleConcurrency(t *testing.T, f func(t *testing.T) []Settler) {
	t.Helper()
	t.Run("settle_one_id", func(t *testing.T) { testSettleOneID(t, settlers(t, f)) })
	t.Run("settle_hot_bucket", func(t *testing.T) { testSettleHot(t, settlers(t, f)) })
}

func settlers(t *testing.T, f func(t *testing.T) []Settler) []Settler {
	t.Helper()
	ss := f(t)
	if len(ss) == 0 {
		t.Fatalf("storetest: factory returned no stores")
	}
	return ss
}

// frozenDebit is a debit of n millitokens on a frozen bucket (no refill
// during a test) of entity e.
func frozenDebit(e string, op cascade.Op, n tokenbucket.Millitokens) cascade.Debit {
	return cascade.Debit{Key: cascade.Key{Namespace: "storetest", Entity: e, Resource: "settle"}, Limit: "tpm", Bucket: frozenLimit, Amount: n, Op: op}
}

// testSettleOneID settles one ID from settleGoroutines goroutines at once,
// across the stores: exactly one applies it, the others report a
// duplicate, and the bucket is charged once.
func testSettleOneID(t *testing.T, ss []Settler) {
	st := &cascade.Settlement{ID: "one", Expires: time.Now().Add(settleTTL), Debits: []cascade.Debit{frozenDebit("one", cascade.Charge, 7*tok)}}
	var (
		applied, dups atomic.Int64
		errs          = make(chan error, settleGoroutines)
		wg            sync.WaitGroup
		start         = make(chan struct{})
	)
	for g := range settleGoroutines {
		s := ss[g%len(ss)]
		wg.Go(func() {
			<-start
			got, err := s.Settle(context.Background(), st)
			switch {
			case err != nil:
				errs <- err
			case got.Duplicate:
				dups.Add(1)
			case len(got.Statuses) != 1 || got.Statuses[0].Remaining != frozenLimit.Capacity-7*tok:
				errs <- fmt.Errorf("applied with statuses %s, want one holding %d", formatSettled(got), frozenLimit.Capacity-7*tok)
			default:
				applied.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("Settle(one) from %d goroutines: %v", settleGoroutines, err)
	}
	if applied.Load() != 1 || dups.Load() != settleGoroutines-1 {
		t.Errorf("Settle(one) from %d goroutines on %d stores: %d applied, %d duplicates, want 1 and %d", settleGoroutines, len(ss), applied.Load(), dups.Load(), settleGoroutines-1)
	}
	if got, want := remaining(t, ss[0], st.Debits[0]), frozenLimit.Capacity-7*tok; got != want {
		t.Errorf("after Settle(one) from %d goroutines the bucket holds %d, want %d (charged once)", settleGoroutines, got, want)
	}
}

// testSettleHot interleaves consumes with settlements (charges of 3 tokens
// and refunds of 2, each settled twice) on one frozen bucket, across the
// stores: it ends holding exactly what it held, less the admitted
// consumes and the charges, plus the refunds, each settled once (a
// consume that failed, which may have landed, counts either way; a
// settlement must not fail). The bucket starts half full, so no refund
// reaches capacity.
func testSettleHot(t *testing.T, ss []Settler) {
	half := frozenDebit("hot", cascade.Consume, frozenLimit.Capacity/2)
	if dec, err := ss[0].Acquire(context.Background(), &cascade.Plan{Debits: []cascade.Debit{half}}); err != nil || !dec.Admitted {
		t.Fatalf("Acquire(half) = %s, %v, want admitted", format(dec), err)
	}
	var (
		admitted, charged, refunded, dups atomic.Int64
		unknown                           atomic.Int64 // consumes that failed: they may have landed
		firstUnknown                      atomic.Value
		errs                              = make(chan error, 2*hotSettlers*hotSettles)
		wg                                sync.WaitGroup
	)
	for g := range hotSettlers {
		s, other := ss[g%len(ss)], ss[(g+1)%len(ss)]
		wg.Go(func() {
			p := &cascade.Plan{Debits: []cascade.Debit{frozenDebit("hot", cascade.Consume, tok)}}
			for range hotConsumes {
				dec, err := s.Acquire(context.Background(), p)
				if err != nil {
					unknown.Add(1)
					firstUnknown.CompareAndSwap(nil, err.Error())
				} else if dec.Admitted {
					admitted.Add(1)
				}
			}
		})
		wg.Go(func() {
			for i := range hotSettles {
				d := frozenDebit("hot", cascade.Charge, 3*tok)
				if i%2 == 1 {
					d = frozenDebit("hot", cascade.Refund, 2*tok)
				}
				st := &cascade.Settlement{ID: fmt.Sprintf("hot-%d-%d", g, i), Expires: time.Now().Add(settleTTL), Debits: []cascade.Debit{d}}
				for _, s := range []Settler{s, other} {
					got, err := s.Settle(context.Background(), st)
					switch {
					case err != nil:
						errs <- err
					case got.Duplicate:
						dups.Add(1)
					case d.Op == cascade.Charge:
						charged.Add(int64(d.Amount))
					default:
						refunded.Add(int64(d.Amount))
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("a call on the hot bucket failed: %v", err)
	}
	if want := int64(hotSettlers * hotSettles); dups.Load() != want {
		t.Errorf("%d duplicates among %d settlements each sent twice, want %d", dups.Load(), want, want)
	}
	// A consume that failed (a store whose write went unanswered) may have
	// landed: each widens the range by a token.
	want := frozenLimit.Capacity - half.Amount - tokenbucket.Millitokens(admitted.Load())*tok - tokenbucket.Millitokens(charged.Load()) + tokenbucket.Millitokens(refunded.Load())
	least := want - tokenbucket.Millitokens(unknown.Load())*tok
	if n := unknown.Load(); n > 0 {
		t.Logf("%d consumes failed, each of unknown outcome; first: %v", n, firstUnknown.Load())
	}
	if got := remaining(t, ss[0], half); got < least || got > want {
		t.Errorf("the hot bucket holds %d, want %d (half of %d, less %d consumed and %d charged, plus %d refunded; %d consumes of unknown outcome)",
			got, want, frozenLimit.Capacity, admitted.Load()*int64(tok), charged.Load(), refunded.Load(), unknown.Load())
	}
}
