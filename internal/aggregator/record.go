package aggregator

import (
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/pkg/dynamo"
)

// Stream event names (Record.Name).
const (
	Insert = "INSERT"
	Modify = "MODIFY"
	Remove = "REMOVE"
)

// Record is one stream record of the table, as both the poller and the
// Lambda deliver it (NEW_AND_OLD_IMAGES).
type Record struct {
	ID       string    // eventID: unique per record, the key of exactly once
	Name     string    // INSERT, MODIFY, REMOVE
	Sequence string    // SequenceNumber
	At       time.Time // ApproximateCreationDateTime: the windows it counts in
	Keys     map[string]types.AttributeValue
	Old      map[string]types.AttributeValue
	New      map[string]types.AttributeValue
}

// Usage is what one record consumed of one limit of one bucket: its
// namespace, entity (the bucket's entity id, a hierarchical branch
// summed into it; each level of a chain is its own entity), resource and
// limit (as the item's attribute names it, escaped), in millitokens, at
// the record's time.
type Usage struct {
	Record string    // the record's ID
	At     time.Time // the record's time
	dynamo.Usage
}

// Deltas returns the usage of each record, in record order and, within a
// record, by limit: the consumption counters' new values less their old
// ones, for bucket items only. A REMOVE (expiry, a purge) counts nothing.
func Deltas(recs []Record) []Usage {
	var out []Usage
	for _, r := range recs {
		for _, u := range r.usage() {
			out = append(out, Usage{Record: r.ID, At: r.At, Usage: u})
		}
	}
	return out
}

// usage is what r consumed, by limit.
func (r Record) usage() []dynamo.Usage {
	if r.Name == Remove {
		return nil
	}
	return dynamo.ItemUsage(r.Keys, r.Old, r.New)
}

// Windows returns the keys of the snapshots a record at t adds to: its
// hour, day and month in UTC ("h2026112614", "d20261126", "m202611").
func Windows(t time.Time) []string {
	keys := make([]string, len(dynamo.Windows))
	for i, w := range dynamo.Windows {
		keys[i] = w.Key(t)
	}
	return keys
}
