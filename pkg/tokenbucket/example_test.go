package tokenbucket_test

import (
	"fmt"
	"time"

	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// A limit of 3 requests per minute, consumed to empty: the fourth request is
// refused and told when to retry.
func Example() {
	l, err := tokenbucket.Rate(3, time.Minute, 0)
	if err != nil {
		fmt.Println(err)
		return
	}
	const t0 = 1_700_000_000_000 // unix ms
	s := l.Full(t0)
	for i := 1; i <= 4; i++ {
		var ok bool
		s, ok = l.TryConsume(s, tokenbucket.PerToken, t0)
		fmt.Printf("request %d: admitted %t, %d left\n", i, ok, l.Available(s, t0))
	}
	wait := l.RetryAfter(s, tokenbucket.PerToken, t0)
	fmt.Println("retry after", wait)
	_, ok := l.TryConsume(s, tokenbucket.PerToken, t0+wait.Milliseconds())
	fmt.Println("after waiting: admitted", ok)
	fmt.Println("full again in", l.TimeToFull(s, t0))
	// Output:
	// request 1: admitted true, 2 left
	// request 2: admitted true, 1 left
	// request 3: admitted true, 0 left
	// request 4: admitted false, 0 left
	// retry after 20.001s
	// after waiting: admitted true
	// full again in 1m0s
}

// Post-hoc charges drive a bucket into debt; refill repays it before any
// request is admitted again.
func ExampleLimit_ForceConsume() {
	l, err := tokenbucket.Rate(10, time.Second, 0) // 10 per second
	if err != nil {
		fmt.Println(err)
		return
	}
	const t0 = 0
	s := l.ForceConsume(l.Full(t0), 25*tokenbucket.PerToken, t0) // 25 tokens of cost already spent
	fmt.Println("available:", l.Available(s, t0))
	fmt.Println("check:", l.Check(s, t0))
	fmt.Println("retry after:", l.RetryAfter(s, tokenbucket.PerToken, t0))
	for _, at := range []int64{1000, 1500, 1600, 2500} {
		fmt.Printf("at %d ms: available %d, check %t\n", at, l.Available(s, at), l.Check(s, at))
	}
	// Output:
	// available: -15
	// check: false
	// retry after: 1.601s
	// at 1000 ms: available -5, check false
	// at 1500 ms: available 0, check false
	// at 1600 ms: available 1, check true
	// at 2500 ms: available 10, check true
}

// Refunds return unused tokens but never lift a bucket above its capacity.
func ExampleLimit_Refund() {
	l, _ := tokenbucket.NewLimit(5*tokenbucket.PerToken, 5*tokenbucket.PerToken, time.Hour)
	s := l.Full(0)
	s, _ = l.TryConsume(s, 2*tokenbucket.PerToken, 0)
	fmt.Println(l.Available(s, 0))
	s = l.Refund(s, 10*tokenbucket.PerToken, 0)
	fmt.Println(l.Available(s, 0))
	// Output:
	// 3
	// 5
}
