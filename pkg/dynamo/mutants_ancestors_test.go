package dynamo_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/descriptors"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
)

// Equivalent mutants, read by internal/mutants (make mutation):
//
// mutant: ARITHMETIC_BASE api.go `d.Timeout = 2 * time.Second` NewClient: 2/time.Second is a dial timeout of 0, none; every call has a context deadline of its own (Config.Timeout, a second at most in the tests), which ends a dial first either way.

// TestAncestorsOfNoneReadsNothing: a walk of at most 0 ancestors, or of an
// entity with no id (a bucket named "#…"), reads nothing.
func TestAncestorsOfNoneReadsNothing(t *testing.T) {
	c := &counter{API: fakeTable(t)}
	s := newStore(t, c, "t", newClock())
	putRaw(t, c, "t", "e", "p", true)
	c.reset()
	for _, k := range []struct {
		entity string
		max    int
	}{{"e", 0}, {"e", -1}, {"#e", descriptors.MaxChain}} {
		got, err := s.Ancestors(context.Background(), cascade.Key{Entity: k.entity, Resource: "r"}, k.max)
		if w, r, _, _ := c.reset(); err != nil || got != nil || w+r != 0 {
			t.Errorf("Ancestors(%q, max %d) = %v, %v with %d reads, %d writes, want nothing and no call", k.entity, k.max, got, err, r, w)
		}
	}
}

// TestChainWarningOncePerTTL: a cycle in the stored chain is logged once
// per ConfigCacheTTL and entity: not again within it, again from the
// instant it has passed.
func TestChainWarningOncePerTTL(t *testing.T) {
	api := fakeTable(t)
	clk := newClock()
	log, hook := logtest.NewNullLogger()
	s := newStoreCfg(t, api, dynamo.Config{Table: "t", Timeout: time.Second, RejectionCacheSize: dynamo.RejectionCacheOff, ConfigCacheTTL: time.Minute}, clk, dynamo.WithLogger(logrus.NewEntry(log)))
	putRaw(t, api, "t", "x", "y", true)
	putRaw(t, api, "t", "y", "x", true)
	walk := func() {
		t.Helper()
		if _, err := s.Ancestors(context.Background(), cascade.Key{Entity: "x", Resource: "r"}, descriptors.MaxChain); err != nil {
			t.Fatal(err)
		}
	}
	warnings := func() int {
		n := 0
		for _, e := range hook.AllEntries() {
			if e.Level == logrus.WarnLevel {
				n++
			}
		}
		return n
	}
	for _, step := range []struct {
		advance time.Duration
		want    int
	}{{0, 1}, {0, 1}, {time.Minute - time.Millisecond, 1}, {time.Millisecond, 2}, {time.Second, 2}} {
		clk.Advance(step.advance)
		walk()
		if got := warnings(); got != step.want {
			t.Fatalf("after %v more: %d warnings, want %d", step.advance, got, step.want)
		}
	}
}

// TestClassifyCanceledTransaction: a cancelled transaction is a failed
// condition only when a reason says so; throttling and conflicts keep
// their own meaning.
func TestClassifyCanceledTransaction(t *testing.T) {
	for _, c := range []struct {
		codes []string
		want  error
	}{
		{[]string{"None", "ThrottlingError"}, dynamo.ErrThrottled},
		{[]string{"None", "TransactionConflict"}, dynamo.ErrConflict},
	} {
		err := dynamo.ClassifyForTest(transactionCanceled(c.codes...))
		if !errors.Is(err, c.want) {
			t.Errorf("classify(cancelled: %v) = %v, want %v", c.codes, err, c.want)
		}
	}
}

// TestNewClientRegionAndEndpoint: no region means DefaultRegion, and an
// endpoint given is the client's.
func TestNewClientRegionAndEndpoint(t *testing.T) {
	for _, c := range []struct{ endpoint, region, wantRegion string }{
		{"", "", dynamo.DefaultRegion},
		{"http://127.0.0.1:1", "eu-west-1", "eu-west-1"},
	} {
		cl, err := dynamo.NewClient(context.Background(), c.endpoint, c.region)
		if err != nil {
			t.Fatal(err)
		}
		o := cl.Options()
		if o.Region != c.wantRegion || aws.ToString(o.BaseEndpoint) != c.endpoint {
			t.Errorf("NewClient(%q, %q): region %q, endpoint %q, want %q and %q", c.endpoint, c.region, o.Region, aws.ToString(o.BaseEndpoint), c.wantRegion, c.endpoint)
		}
	}
}
