package lease_test

import (
	"fmt"
	"time"

	"github.com/dynalimit/dynalimit/internal/lease"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

func Example() {
	// Every replica holds the same key (LEASE_SIGNING_KEY or a key file).
	ring, err := lease.NewKeyring([]byte("an example key of at least thirty-two bytes"))
	if err != nil {
		panic(err)
	}
	now := time.UnixMilli(1_790_000_000_000)
	tpm, _ := tokenbucket.Rate(100_000, time.Minute, 0)

	// At admission: sign what was debited, for Envoy to carry.
	token, err := ring.Sign(&lease.Lease{
		ID:      lease.NewID(),
		Domain:  "llm",
		Expires: now.Add(lease.DefaultTTL),
		Buckets: []lease.Bucket{{
			Key:    cascade.Key{Namespace: "default", Entity: "tenant-acme", Resource: "gpt-4o"},
			Limits: []lease.Limit{{Name: "tpm", Bucket: tpm, Estimate: 500 * tokenbucket.PerToken}},
		}},
	})
	if err != nil {
		panic(err)
	}

	// After the response, on any replica: verify, then settle.
	l, err := ring.Verify(token, now.Add(time.Second))
	fmt.Println(err, l.Domain, l.Buckets[0].Key.Entity, l.Buckets[0].Limits[0].Estimate/tokenbucket.PerToken)

	// A token altered in transit (here its signature), or verified too
	// late, is refused.
	altered := token[:len(token)-5] + "A" + token[len(token)-4:]
	if altered == token {
		altered = token[:len(token)-5] + "B" + token[len(token)-4:]
	}
	_, err = ring.Verify(altered, now)
	fmt.Println(lease.Reason(err))
	_, err = ring.Verify(token, now.Add(lease.DefaultTTL))
	fmt.Println(lease.Reason(err))
	// Output:
	// <nil> llm tenant-acme 500
	// bad_signature
	// expired
}
