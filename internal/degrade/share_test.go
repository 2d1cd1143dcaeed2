package degrade_test

import (
	"context"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dynalimit/dynalimit/internal/degrade"
	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/admin"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// roomy holds 10,000 tokens refilled at one a minute: nothing is refused
// while demand is measured.
var roomy = tokenbucket.Limit{Capacity: 10000 * token, RefillAmount: token, RefillPeriod: time.Minute}

// fleetOn returns n replicas of a fleet of n, each a degrade.Store over a
// DynamoDB store of its own on one fake table. Made inside a synctest
// bubble; nothing repays.
func fleetOn(t *testing.T, n int) (*dynamotest.Fake, []*degrade.Store) {
	t.Helper()
	ctx := context.Background()
	f := dynamotest.NewFake()
	if err := admin.CreateTable(ctx, f, "t"); err != nil {
		t.Fatal(err)
	}
	out := make([]*degrade.Store, n)
	for i := range out {
		shared, err := dynamo.NewStore(ctx, f, dynamo.Config{Table: "t", Timeout: 50 * time.Millisecond, ThrottleFails: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = shared.Close() })
		out[i] = degrade.New(shared, degrade.Config{ID: "r" + string(rune('a'+i)), Share: func() int { return n }})
	}
	return f, out
}

func on(op cascade.Op) *cascade.Plan {
	return &cascade.Plan{Debits: []cascade.Debit{{Key: key("tenant"), Limit: "l", Bucket: roomy, Amount: token, Op: op}}}
}

// demand runs rounds of 100 ms in which replica i consumes per[i] tokens
// one at a time (a negative count: it only checks the bucket, once).
func demand(t *testing.T, fleet []*degrade.Store, per []int, rounds int) {
	t.Helper()
	for range rounds {
		for i, d := range fleet {
			n, op := per[i], cascade.Consume
			if n < 0 {
				n, op = 1, cascade.Check
			}
			for range n {
				if dec, err := d.Acquire(context.Background(), on(op)); err != nil || !dec.Admitted || dec.Local {
					t.Fatalf("replica %d: %+v, %v; want admitted by the store", i, dec, err)
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func shares(fleet []*degrade.Store) []float64 {
	out := make([]float64, len(fleet))
	for i, d := range fleet {
		out[i] = d.ShareOf(&on(cascade.Consume).Debits[0])
	}
	return out
}

func near(got, want float64) bool { return math.Abs(got-want) <= 0.03 }

// TestShareFollowsDemand: two replicas whose demand is 3:1 get shares of
// about 0.75 and 0.25, adding up to about 1, and through an outage admit
// about those shares of what they last saw of the bucket.
func TestShareFollowsDemand(t *testing.T) { synctest.Test(t, testShareFollowsDemand) }

func testShareFollowsDemand(t *testing.T) {
	f, fleet := fleetOn(t, 2)
	demand(t, fleet, []int{3, 1}, 40)
	got := shares(fleet)
	t.Logf("shares %.3f", got)
	if !near(got[0], 0.75) || !near(got[1], 0.25) {
		t.Errorf("shares %.3f, want about 0.75 and 0.25", got)
	}
	if sum := got[0] + got[1]; sum > 1+degrade.Slack(2) {
		t.Errorf("shares add up to %.3f, past 1 + %.3f", sum, degrade.Slack(2))
	}
	left := float64(10000 - 160) // what both last saw, within a round
	f.SetFail(func(context.Context, string) error { return unanswered() })
	for i, d := range fleet {
		outage(t, d)
		admitted := 0
		for range 10000 {
			if dec, _ := d.Acquire(context.Background(), on(cascade.Consume)); dec.Admitted {
				admitted++
			}
		}
		if want := got[i] * left; math.Abs(float64(admitted)-want) > 0.02*left {
			t.Errorf("replica %d admitted %d through the outage, want about %.0f (its share of the %.0f it last saw)", i, admitted, want, left)
		}
	}
	f.SetFail(nil)
}

// TestShareNoHistory: a replica that saw no demand of an item, or less
// than a second of it, takes 1/N.
func TestShareNoHistory(t *testing.T) { synctest.Test(t, testShareNoHistory) }

func testShareNoHistory(t *testing.T) {
	_, fleet := fleetOn(t, 3)
	if got := shares(fleet); got[0] != 1.0/3 {
		t.Errorf("no history: share %.4f, want 1/3", got[0])
	}
	demand(t, fleet[:1], []int{5}, 5) // half a second of demand
	if got := shares(fleet); got[0] != 1.0/3 {
		t.Errorf("half a second of history: share %.4f, want 1/3", got[0])
	}
}

// TestShareIdleFloorAndSum: a replica that only checks the bucket keeps
// the floor, 1/(4N); the shares of the fleet add up to at most 1 plus the
// floors.
func TestShareIdleFloorAndSum(t *testing.T) { synctest.Test(t, testShareIdleFloorAndSum) }

func testShareIdleFloorAndSum(t *testing.T) {
	_, fleet := fleetOn(t, 3)
	demand(t, fleet, []int{3, 1, -1}, 40)
	got := shares(fleet)
	t.Logf("shares %.3f", got)
	if got[2] != 1.0/12 {
		t.Errorf("idle replica's share %.4f, want the floor 1/12", got[2])
	}
	if !near(got[0], 0.75) || !near(got[1], 0.25) {
		t.Errorf("shares %.3f, want about 0.75 and 0.25 beside the idle one", got)
	}
	sum := got[0] + got[1] + got[2]
	if sum > 1+degrade.Slack(3) {
		t.Errorf("shares add up to %.3f, past 1 + %.3f", sum, degrade.Slack(3))
	}
}
