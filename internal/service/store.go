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

// NamespaceGate tells which namespaces the service no longer decides for:
// those deleted in the namespace registry of the DynamoDB or the Redis
// store (dadmin.DeletedNamespaces). A descriptor whose rule is in one is
// answered as a descriptor no rule matches (OK, no bucket touched), and so
// is a limit override while the deployment's namespace is deleted.
// Implementations MUST be safe for concurrent use and cheap: the service
// asks once per matched descriptor.
type NamespaceGate interface {
	// Deleted reports whether namespace ns ("" the deployment's) is
	// deleted.
	Deleted(ns string) bool
}
