package usage

import (
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
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

// usage is what r consumed, by limit: the consumption counters' new
// values less their old ones, for bucket items only. A REMOVE (expiry, a
// purge) counts nothing.
func (r Record) usage() []Usage {
	if r.Name == Remove {
		return nil
	}
	return ItemUsage(r.Keys, r.Old, r.New)
}
