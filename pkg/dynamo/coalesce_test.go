package dynamo_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/admin"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// TestRecordReadsCoalesce: 200 decisions at once, each on a new key, while
// DynamoDB takes 20 ms a read. Each needs its key's stored limits; the
// reads that would each have been a call share a few: at most a few
// running at a time, the keys asked for meanwhile read together. Every
// decision is admitted, and none waits for a read of its own.
func TestRecordReadsCoalesce(t *testing.T) {
	f := dynamotest.NewFake()
	if err := admin.CreateTable(context.Background(), f, "t"); err != nil {
		t.Fatal(err)
	}
	c := newClock()
	s := newStoreCfg(t, f, dynamo.Config{Table: "t", Timeout: 2 * time.Second}, c)
	f.SetFail(func(ctx context.Context, op string) error {
		if op == "BatchGetItem" {
			time.Sleep(20 * time.Millisecond)
		}
		return nil
	})
	f.ResetCalls()
	lim := mustLimit(t, 10, time.Second, 0)
	const n = 200
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			p := &cascade.Plan{Debits: []cascade.Debit{{Key: cascade.Key{Entity: fmt.Sprintf("key-%d", i), Resource: "r"}, Limit: "rpm", Bucket: lim, Amount: tokenbucket.PerToken}}}
			dec, err := s.Acquire(context.Background(), p)
			if err != nil || !dec.Admitted {
				errs <- fmt.Errorf("Acquire(key-%d) = %+v, %w, want admitted", i, dec, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// Without coalescing: one read per decision (200). Each read carries
	// up to 100 keys (the decision's two entity records, and the shared
	// resource and system ones once).
	if got := f.Calls("BatchGetItem"); got > n/4 {
		t.Errorf("BatchGetItem calls for %d new keys at once = %d, want at most %d (reads of many keys shared)", n, got, n/4)
	} else {
		t.Logf("%d decisions on new keys: %d BatchGetItem calls", n, got)
	}
}
