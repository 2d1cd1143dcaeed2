package admin

import "github.com/dynalimit/dynalimit/pkg/dynamo"

// Store is the operator's side of a table: entities, stored limits, the
// audit log, the namespace registry and lifecycle, and purges. It writes
// through the decision store's table handle and tells that store what it
// changed, so that the store's next decision reads it (its caches of
// limits and entities). It is safe for concurrent use.
type Store struct {
	st *dynamo.Store
	t  *dynamo.Table
}

// New returns the operator's side of st's table.
func New(st *dynamo.Store) *Store { return &Store{st: st, t: st.Table()} }
