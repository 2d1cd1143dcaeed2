package cascade_test

import (
	"fmt"
	"time"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// A request charged to an API key and to its tenant is decided
// all-or-nothing: once the key's bucket refuses, the tenant keeps its tokens.
// An advisory (shadow-mode) limit is reported but never refuses.
func ExampleDecide() {
	keyLimit, _ := tokenbucket.Rate(2, time.Minute, 0)      // 2 per minute per key
	tenantLimit, _ := tokenbucket.Rate(100, time.Minute, 0) // 100 per minute per tenant
	shadow, _ := tokenbucket.Rate(1, time.Minute, 0)        // a stricter limit under trial
	p := &cascade.Plan{Debits: []cascade.Debit{
		{Key: cascade.Key{Namespace: "default", Entity: "key-1", Resource: "chat"}, Limit: "rpm",
			Bucket: keyLimit, Amount: tokenbucket.PerToken, Op: cascade.Consume},
		{Key: cascade.Key{Namespace: "default", Entity: "tenant-a", Resource: "chat"}, Limit: "rpm",
			Bucket: tenantLimit, Amount: tokenbucket.PerToken, Op: cascade.Consume},
		{Key: cascade.Key{Namespace: "default", Entity: "key-1", Resource: "chat"}, Limit: "trial",
			Bucket: shadow, Amount: tokenbucket.PerToken, Op: cascade.Consume, Role: cascade.Advisory},
	}}
	slot := []int{0, 1, 2} // each debit on a bucket of its own
	const t0 = 1_700_000_000_000
	states := []tokenbucket.State{keyLimit.Full(t0), tenantLimit.Full(t0), shadow.Full(t0)}
	for i := 1; i <= 3; i++ {
		// A store loads each bucket's level, decides, and writes back the
		// levels that changed (a store with conditional writes sends each
		// level's Write with its Bounds as the condition).
		levels := make([]tokenbucket.Level, len(states))
		for k, s := range states {
			levels[k] = tokenbucket.Stored(s)
		}
		dec := cascade.Decide(p, slot, levels, t0)
		for k := range levels {
			if levels[k].Changed() {
				states[k] = levels[k].State()
			}
		}
		fmt.Printf("request %d: admitted %t\n", i, dec.Admitted)
		for j, st := range dec.Statuses {
			fmt.Printf("  %s/%s: ok %t, remaining %d, retry after %v, full in %v\n",
				p.Debits[j].Key.Entity, p.Debits[j].Limit, st.OK, st.Remaining/tokenbucket.PerToken, st.RetryAfter, st.ResetAfter)
		}
	}
	// Output:
	// request 1: admitted true
	//   key-1/rpm: ok true, remaining 1, retry after 0s, full in 30s
	//   tenant-a/rpm: ok true, remaining 99, retry after 0s, full in 600ms
	//   key-1/trial: ok true, remaining 0, retry after 0s, full in 1m0s
	// request 2: admitted true
	//   key-1/rpm: ok true, remaining 0, retry after 0s, full in 1m0s
	//   tenant-a/rpm: ok true, remaining 98, retry after 0s, full in 1.2s
	//   key-1/trial: ok false, remaining 0, retry after 1m0s, full in 1m0s
	// request 3: admitted false
	//   key-1/rpm: ok false, remaining 0, retry after 30s, full in 1m0s
	//   tenant-a/rpm: ok true, remaining 98, retry after 0s, full in 1.2s
	//   key-1/trial: ok false, remaining 0, retry after 1m0s, full in 1m0s
}
