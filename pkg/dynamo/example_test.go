package dynamo_test

import (
	"context"
	"fmt"
	"time"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/admin"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// A store on a table (here the in-memory fake; in production a
// *dynamodb.Client from NewClient): two requests fit a 2-per-minute bucket,
// the third waits 30 s for a token.
func ExampleStore_Acquire() {
	ctx := context.Background()
	api := dynamotest.NewFake()
	if err := admin.CreateTable(ctx, api, "ratelimit"); err != nil {
		fmt.Println(err)
		return
	}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	s, err := dynamo.NewStore(ctx, api, dynamo.Config{Table: "ratelimit"}, dynamo.WithClock(func() time.Time { return now }))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	_, rpm, _ := admin.ParseLimit("rpm:2/min")
	plan := &cascade.Plan{Debits: []cascade.Debit{{
		Key:   cascade.Key{Namespace: "acme", Entity: "api-key-1", Resource: "gpt-4"},
		Limit: "rpm", Bucket: rpm, Amount: tokenbucket.PerToken,
	}}}
	for range 3 {
		dec, err := s.Acquire(ctx, plan)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(dec.Admitted, dec.Statuses[0].Remaining/tokenbucket.PerToken, dec.Statuses[0].RetryAfter)
	}
	// Output:
	// true 1 0s
	// true 0 0s
	// false 0 30s
}

func ExampleParseLimit() {
	name, l, err := admin.ParseLimit("tpm:50000/min:80000")
	fmt.Println(name, l.Capacity/tokenbucket.PerToken, l.RefillAmount/tokenbucket.PerToken, l.RefillPeriod, err)
	fmt.Println(admin.FormatLimit(name, l))
	// Output:
	// tpm 80000 50000 1m0s <nil>
	// tpm:50000/min:80000
}
