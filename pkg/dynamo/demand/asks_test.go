package demand_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo/demand"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// perSecond is a debit of one token of a limit of n a second.
func perSecond(t testing.TB, name string, n uint64) cascade.Debit {
	t.Helper()
	l, err := tokenbucket.Rate(n, time.Second, 0)
	if err != nil {
		t.Fatal(err)
	}
	return cascade.Debit{Key: k, Limit: name, Bucket: l, Amount: tokenbucket.PerToken}
}

// TestAsksRatio: 50 decisions in 250 ms on a limit of 100 a second ask
// twice its refill; the largest of two limits counts; the measure stands
// for two windows, then is gone.
func TestAsksRatio(t *testing.T) {
	a := demand.NewAsks(8)
	fast, slow := perSecond(t, "fast", 1000), perSecond(t, "slow", 100)
	for ms := int64(0); ms < 250; ms += 5 { // 50 decisions
		a.Add("b", []cascade.Debit{fast, slow}, ms)
	}
	if got := a.Ratio("b", 249); got != 0 {
		t.Errorf("Ratio before a whole window = %v, want 0", got)
	}
	added := a.Add("b", []cascade.Debit{fast, slow}, 250) // the 51st ends the window
	if got := a.Ratio("b", 250); got < 2.03 || got > 2.05 || added != got {
		t.Errorf("Ratio after 51 decisions in 250 ms of a limit of 100/s = %v (Add answered %v), want 51/25 = 2.04 from both", got, added)
	}
	if got := a.Ratio("b", 250+499); got == 0 {
		t.Errorf("Ratio within two windows = 0, want the measure")
	}
	if got := a.Ratio("b", 250+500); got != 0 {
		t.Errorf("Ratio two windows on = %v, want 0", got)
	}
	if got := a.Ratio("other", 250); got != 0 {
		t.Errorf("Ratio of a bucket never asked = %v, want 0", got)
	}
}

// TestAsksCalendarIgnored: a calendar budget's debits ask nothing (its
// periods are not milliseconds); a bucket of only such asks 0.
func TestAsksCalendarIgnored(t *testing.T) {
	cal, err := tokenbucket.NewCalendar(tokenbucket.Monthly, "UTC")
	if err != nil {
		t.Fatal(err)
	}
	d := perSecond(t, "budget", 10)
	d.Bucket.Calendar = cal
	a := demand.NewAsks(8)
	for ms := int64(0); ms <= 300; ms += 10 {
		a.Add("b", []cascade.Debit{d}, ms)
	}
	if got := a.Ratio("b", 300); got != 0 {
		t.Errorf("Ratio of a calendar budget = %v, want 0", got)
	}
}

// TestAsksBounded: an Asks of two buckets forgets the least recently
// asked when a third comes.
func TestAsksBounded(t *testing.T) {
	a := demand.NewAsks(2)
	for _, b := range []string{"x", "y", "z"} {
		a.Hold(b, 1, 0, 1000)
	}
	if a.Ratio("x", 10) != 0 || a.Ratio("y", 10) != 1 || a.Ratio("z", 10) != 1 {
		t.Errorf("after x, y, z in an Asks of 2: x %v, y %v, z %v; want 0, 1, 1", a.Ratio("x", 10), a.Ratio("y", 10), a.Ratio("z", 10))
	}
}

func ExampleAsks() {
	l, _ := tokenbucket.Rate(100, time.Second, 0)
	d := cascade.Debit{Limit: "rps", Bucket: l, Amount: tokenbucket.PerToken}
	a := demand.NewAsks(1024)
	for ms := int64(0); ms <= 250; ms += 10 { // 26 decisions in 250 ms
		a.Add("tenant-a", []cascade.Debit{d}, ms)
	}
	fmt.Printf("%.2f of the limit's refill\n", a.Ratio("tenant-a", 250))
	// Output: 1.04 of the limit's refill
}
