package memstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/dynalimit/dynalimit/internal/memstore"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

func Example() {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	s := memstore.New(memstore.WithClock(func() time.Time { return now }))

	limit, _ := tokenbucket.Rate(2, time.Second, 0) // 2 requests a second
	p := &cascade.Plan{Debits: []cascade.Debit{{
		Key:    cascade.Key{Namespace: "default", Entity: "tenant-a", Resource: "chat"},
		Limit:  "rps",
		Bucket: limit,
		Amount: tokenbucket.PerToken,
	}}}
	for range 3 {
		dec, err := s.Acquire(context.Background(), p)
		if err != nil {
			fmt.Println(err)
			return
		}
		st := dec.Statuses[0]
		fmt.Println(dec.Admitted, st.Remaining/tokenbucket.PerToken, st.RetryAfter)
	}
	fmt.Println(s.Stats().Buckets)
	// Output:
	// true 1 0s
	// true 0 0s
	// false 0 500ms
	// 1
}
