package storetest_test

import (
	"fmt"
	"time"

	"github.com/dynalimit/dynalimit/internal/storetest"
)

func ExampleClock() {
	c := storetest.NewClock(storetest.Epoch)
	c.Advance(250 * time.Millisecond)
	fmt.Println(c.Now().Sub(storetest.Epoch))
	c.Set(storetest.Epoch.Add(-time.Second)) // clocks may go backwards
	fmt.Println(c.Now().Sub(storetest.Epoch))
	// Output:
	// 250ms
	// -1s
}
