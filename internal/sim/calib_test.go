package main

import (
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dynalimit/dynalimit/internal/israce"
)

// within says whether got is within 20% of want.
func within(got, want float64) bool { return math.Abs(got-want) <= 0.2*want }

// simulated runs sc in a bubble. The calibrations decide 150,000 to
// 400,000 times each: under -race a minute, so make test runs them in its
// pass without it.
func simulated(t *testing.T, sc Scenario) *run {
	t.Helper()
	if israce.Enabled {
		t.Skip("400,000 decisions take a minute under -race; make test runs the calibrations without it")
	}
	var r *run
	synctest.Test(t, func(t *testing.T) {
		var err error
		if r, err = simulate(sc); err != nil {
			t.Fatal(err)
		}
	})
	return r
}

// admittedIn is what r admitted from from to to.
func (r *run) admittedIn(from, to time.Duration) float64 {
	var n int64
	for i := int(from / time.Second); i < int(to/time.Second); i++ {
		n += r.st.secs[i].admitted.Load()
	}
	return float64(n)
}

// TestCalibrationHotItem: TestFleetHotBucket simulated admits 199 of 200
// and makes 309 UpdateItem, within 20%, as measured on DynamoDB Local.
func TestCalibrationHotItem(t *testing.T) {
	sc, _ := scenario("calib-hotitem")
	r := simulated(t, sc)
	admitted, writes := r.admittedIn(0, sc.Duration), float64(r.fake.Calls("UpdateItem"))
	t.Logf("admitted %.0f (measured 199), UpdateItem %.0f (measured 309)", admitted, writes)
	if !within(admitted, 199) || admitted > 200 || !within(writes, 309) {
		t.Errorf("admitted %.0f, UpdateItem %.0f; want 199 and 309 within 20%% (and at most the bound of 200)", admitted, writes)
	}
}

// TestCalibrationDoubling: a replica's ramping writes double the bucket
// once, at ShardWriteRate (100) writes in the second before, within 20%.
func TestCalibrationDoubling(t *testing.T) {
	sc, _ := scenario("calib-doubling")
	r := simulated(t, sc)
	if len(r.st.doubled) != 1 {
		t.Fatalf("%d doublings, want 1", len(r.st.doubled))
	}
	d := r.st.doubled[0]
	t.Logf("doubled at %v after %d writes of replica %d in the second before (ShardWriteRate 100)", d.at, d.writes, d.replica)
	if !within(float64(d.writes), 100) {
		t.Errorf("doubled after %d writes in the second before, want 100 within 20%%", d.writes)
	}
}

// TestCalibrationOutage: TestOutageThreeModes, local, simulated admits 198
// in the 10 s outage and 407 over the 24 s run, within 20%.
func TestCalibrationOutage(t *testing.T) {
	sc, _ := scenario("calib-outage")
	r := simulated(t, sc)
	during, total := r.admittedIn(sc.Outage.At, sc.Outage.At+sc.Outage.For), r.admittedIn(0, sc.Duration)
	t.Logf("admitted %.0f in the outage (measured 198), %.0f over the run (measured 407)", during, total)
	if !within(during, 198) || !within(total, 407) {
		t.Errorf("admitted %.0f in the outage and %.0f over the run, want 198 and 407 within 20%%", during, total)
	}
}
