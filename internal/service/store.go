package service

import (
	"context"

	"github.com/dynalimit/dynalimit/pkg/cascade"
)

// Store decides plans against bucket state. The embedded store
// (internal/memstore) and the DynamoDB store (pkg/dynamo) implement it, and
// one conformance suite (internal/storetest) holds both to the same behaviour.
//
// Implementations MUST be safe for concurrent use, MUST decide each plan
// all-or-nothing exactly as cascade.Decide does, and MUST return one Status per
// debit in plan order. An error means the store could not decide (unavailable,
// timed out); being over limit is a decision, not an error.
type Store interface {
	Acquire(ctx context.Context, plan *cascade.Plan) (cascade.Decision, error)
}
