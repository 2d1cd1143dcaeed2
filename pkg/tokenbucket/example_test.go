package tokenbucket_test

import (
	"fmt"
	"time"

	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// A limit of 3 requests per minute over time: a full bucket admits three,
// refuses the fourth with an exact wait, and refills one token every 20 s.
// The store keeps one number per bucket, its level.
func Example() {
	l, err := tokenbucket.Rate(3, time.Minute, 0)
	if err != nil {
		fmt.Println(err)
		return
	}
	const t0 = 1_700_000_000_000 // unix ms
	s := l.Full(t0)
	try := func(at int64) {
		v := tokenbucket.Stored(s)
		ok := l.TryConsume(&v, tokenbucket.PerToken, at)
		s = v.State()
		fmt.Printf("+%-6v admitted %-5t %d left, retry after %v\n",
			time.Duration(at-t0)*time.Millisecond, ok, l.Available(s, at), l.RetryAfter(s, tokenbucket.PerToken, at))
	}
	for range 4 {
		try(t0)
	}
	try(t0 + 19_999)
	try(t0 + 20_000)
	fmt.Println("full again in", l.TimeToFull(s, t0+20_000))
	// Output:
	// +0s     admitted true  2 left, retry after 0s
	// +0s     admitted true  1 left, retry after 0s
	// +0s     admitted true  0 left, retry after 20s
	// +0s     admitted false 0 left, retry after 20s
	// +19.999s admitted false 0 left, retry after 1ms
	// +20s    admitted true  0 left, retry after 20s
	// full again in 1m0s
}

// Post-hoc charges drive a bucket into debt; refill repays it before a
// request is admitted again.
func ExampleLimit_Charge() {
	l, err := tokenbucket.Rate(10, time.Second, 0) // 10 per second
	if err != nil {
		fmt.Println(err)
		return
	}
	v := tokenbucket.Stored(l.Full(0))
	fmt.Println("fitted:", l.Charge(&v, 25*tokenbucket.PerToken, 0)) // 25 tokens already spent
	s := v.State()
	fmt.Println("retry after:", l.RetryAfter(s, tokenbucket.PerToken, 0))
	for _, at := range []int64{0, 1000, 1500, 1600, 2500} {
		c := tokenbucket.Stored(s)
		fmt.Printf("at %d ms: available %d, check %t\n", at, l.Available(s, at), l.Check(&c, at))
	}
	// Output:
	// fitted: false
	// retry after: 1.6s
	// at 0 ms: available -15, check false
	// at 1000 ms: available -5, check false
	// at 1500 ms: available 0, check true
	// at 1600 ms: available 1, check true
	// at 2500 ms: available 10, check true
}

// Refunds return unused tokens but never lift a bucket above its capacity.
func ExampleLimit_Refund() {
	l, _ := tokenbucket.NewLimit(5*tokenbucket.PerToken, 5*tokenbucket.PerToken, time.Hour)
	v := tokenbucket.Stored(l.Full(0))
	l.TryConsume(&v, 2*tokenbucket.PerToken, 0)
	fmt.Println(l.Available(v.State(), 0))
	l.Refund(&v, 10*tokenbucket.PerToken, 0)
	fmt.Println(l.Available(v.State(), 0))
	// Output:
	// 3
	// 5
}

// A store with conditional writes sends the write with its condition: the
// decision holds for every stored level within Bounds, so concurrent
// consumers of a bucket that is not running low never conflict.
func ExampleLevel() {
	l, _ := tokenbucket.Rate(10, time.Second, 0)
	const now = 1000
	v := tokenbucket.Stored(l.Empty(now - 500)) // believed: empty half a second ago, 5 tokens now
	fmt.Println("admitted:", l.TryConsume(&v, 2*tokenbucket.PerToken, now))
	set, value := v.Write()
	lo, hi := v.Bounds()
	fmt.Printf("set %t, add %v, if %v ≤ X ≤ %v\n", set, value, lo, hi)
	// Output:
	// admitted: true
	// set false, add 2000000, if 0 ≤ X ≤ 8000000
}
