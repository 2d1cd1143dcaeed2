package degrade_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dynalimit/dynalimit/internal/degrade"
	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/admin"
)

// TestLateProcessProbesAtOnce: an item that degrades while this process
// runs late is tried again at once, and is back on the shared store before
// any time passes; one that degrades on time waits for Config.Probe.
func TestLateProcessProbesAtOnce(t *testing.T) {
	for _, late := range []bool{true, false} {
		t.Run(map[bool]string{true: "late", false: "on time"}[late], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { testProbe(t, late) })
		})
	}
}

func testProbe(t *testing.T, late bool) {
	ctx := context.Background()
	f := dynamotest.NewFake()
	if err := admin.CreateTable(ctx, f, "t"); err != nil {
		t.Fatal(err)
	}
	shared, err := dynamo.NewStore(ctx, f, dynamo.Config{Table: "t", Timeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	d := degrade.New(shared, degrade.Config{ID: "r", Late: func() bool { return late }})
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = d.Run(runCtx); close(done) }()
	defer func() {
		cancel()
		<-done
		_ = shared.Close()
	}()
	var once atomic.Bool
	f.SetFailItem(func(op, pk string) error {
		if strings.Contains(pk, "/BUCKET#") && once.CompareAndSwap(false, true) {
			return unanswered()
		}
		return nil
	})
	if dec, err := d.Acquire(ctx, one("a")); err != nil || !dec.Local {
		t.Fatalf("the failed call: %+v, %v; want decided locally", dec, err)
	}
	synctest.Wait()
	dec, err := d.Acquire(ctx, one("a"))
	if err != nil {
		t.Fatal(err)
	}
	if dec.Local == late {
		t.Errorf("right after: decided locally %v, want %v (late %v)", dec.Local, !late, late)
	}
	time.Sleep(degrade.DefaultProbe + 10*time.Millisecond)
	synctest.Wait()
	if dec, err := d.Acquire(ctx, one("a")); err != nil || dec.Local {
		t.Errorf("after the probe: %+v, %v; want the shared store's decision", dec, err)
	}
}
