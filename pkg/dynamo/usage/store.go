package usage

import (
	"time"

	"github.com/dynalimit/dynalimit/pkg/dynamo"
)

// Store is the usage history of a table and its stream's bookkeeping: it
// writes the snapshots the aggregator folds stream records into
// (ApplyUsage), reads them (Usage), and keeps the stream poller's
// checkpoints and lease. It is safe for concurrent use.
type Store struct {
	t         *dynamo.Table
	retention time.Duration
}

// New returns the usage history of the table t: snapshots live retention
// past the end of their window (dynamo.DefaultUsageRetention when zero).
func New(t *dynamo.Table, retention time.Duration) *Store {
	if retention <= 0 {
		retention = dynamo.DefaultUsageRetention
	}
	return &Store{t: t, retention: retention}
}

// Of returns the usage history of the decision store st's table, with
// st's Config.UsageRetention.
func Of(st *dynamo.Store) *Store { return New(st.Table(), st.Config().UsageRetention) }
