package usage

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/item"
)

// Window is the span of a usage snapshot: an hour, a day or a month of UTC
// time, named by its start (Key).
type Window string

// The windows every usage record is added to.
const (
	Hourly  Window = "hourly"
	Daily   Window = "daily"
	Monthly Window = "monthly"
)

// Windows lists every window a usage record is added to, shortest first.
var Windows = []Window{Hourly, Daily, Monthly}

// ParseWindow returns the window named s (hourly, daily or monthly).
func ParseWindow(s string) (Window, error) {
	for _, w := range Windows {
		if string(w) == s {
			return w, nil
		}
	}
	return "", fmt.Errorf("dynamo: unknown usage window %q (want hourly, daily or monthly)", s)
}

// prefix is the window's letter in a snapshot's key.
func (w Window) prefix() string {
	switch w {
	case Hourly:
		return "h"
	case Daily:
		return "d"
	case Monthly:
		return "m"
	}
	return ""
}

// layout is the window's time layout in a snapshot's key.
func (w Window) layout() string {
	switch w {
	case Hourly:
		return "2006010215"
	case Daily:
		return "20060102"
	}
	return "200601"
}

// Key names the window holding t, in UTC: "h2026112614" (14:00 to 15:00 on
// 26 November 2026), "d20261126", "m202611". An unknown window has no key.
func (w Window) Key(t time.Time) string {
	if w.prefix() == "" {
		return ""
	}
	return w.prefix() + t.UTC().Format(w.layout())
}

// Start is when the window holding t starts, in UTC.
func (w Window) Start(t time.Time) time.Time {
	t = t.UTC()
	switch w {
	case Hourly:
		return t.Truncate(time.Hour)
	case Daily:
		return time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	}
	return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
}

// End is when the window holding t ends (the next one's start), in UTC.
func (w Window) End(t time.Time) time.Time {
	s := w.Start(t)
	switch w {
	case Hourly:
		return s.Add(time.Hour)
	case Daily:
		return s.AddDate(0, 0, 1)
	}
	return s.AddDate(0, 1, 0)
}

// parseWindowKey reads a window key back: its window and start.
func parseWindowKey(key string) (Window, time.Time, bool) {
	for _, w := range Windows {
		rest, ok := strings.CutPrefix(key, w.prefix())
		if !ok || len(rest) != len(w.layout()) {
			continue
		}
		t, err := time.ParseInLocation(w.layout(), rest, time.UTC)
		if err == nil {
			return w, t, true
		}
	}
	return "", time.Time{}, false
}

// Usage is what one stream record of a bucket item consumed of one limit:
// the difference of the limit's consumption counter (b_{limit}_tc) between
// the item's old and new images, in millitokens. Negative when the write
// gave back more than it took (a refund, or the give-back of a refused
// plan, which cancels what the plan's part consumed).
type Usage struct {
	Namespace string // the bucket item's ns attribute
	Entity    string // the entity id: the bucket's entity up to its first '#'
	Resource  string
	Limit     string // the limit's name as the item's attribute spells it (escaped)
	// Millitokens consumed; never zero in an Entry.
	Millitokens int64
}

// Entry is the usage of one stream record (a Record), applied to the
// snapshots of its event time at most once per ID.
type Entry struct {
	ID    string    // the stream record's eventID
	At    time.Time // its ApproximateCreationDateTime: which windows it counts in
	Usage []Usage
}

// Report says what one ApplyUsage call did.
type Report struct {
	// Applied counts the records whose usage was added by this call
	// (records without usage included: there was nothing to add).
	Applied int
	// Duplicates counts the records applied before (by this call's
	// earlier attempt, another call or another consumer): not added again.
	Duplicates int
	// Writes counts the snapshot updates written (one per snapshot item
	// and transaction).
	Writes int
	// WriteUnits is the write capacity the transactions consumed, as
	// DynamoDB reported it.
	WriteUnits float64
	// Failed lists the IDs of records not applied: they may be applied by
	// a later call.
	Failed []string
}

// Snapshot is one snapshot: what an entity consumed of a resource's
// limits in one window, in millitokens by limit name.
type Snapshot struct {
	Namespace string
	Entity    string
	Resource  string
	Window    Window
	Start     time.Time // the window's start, UTC
	Limits    map[string]int64
}

// ItemUsage returns what one write of a bucket item consumed, limit by
// limit, from its old and new images (a stream record's, NEW_AND_OLD_IMAGES):
// the difference of each limit's consumption counter (b_{limit}_tc). A
// limit absent from the old image (a new item, or a limit new to the item)
// counts from zero. Levels are never read: refill and clamping distort them.
// Items other than bucket items, removals (a new image without the item:
// expiry or a purge) and counters that did not change give nothing; so
// does a counter that is not an integer, and a difference past int64.
// keys, when the new image lacks them, names the item (PK).
func ItemUsage(keys, old, new map[string]types.AttributeValue) []Usage {
	pk := item.GetS(new, item.AttrPK)
	if pk == "" {
		pk = item.GetS(keys, item.AttrPK)
	}
	if !isBucketPK(pk) || len(new) == 0 {
		return nil
	}
	entity, _ := dynamo.SplitEntity(item.GetS(new, item.AttrEntity))
	var out []Usage
	for name, av := range new {
		prefix, field, ok := item.LimitField(name)
		if !ok || field != item.FieldConsumed {
			continue
		}
		now, ok := item.Number(av)
		if !ok {
			continue
		}
		var was int64
		if o, present := old[name]; present {
			if was, ok = item.Number(o); !ok {
				continue
			}
		}
		if d := now - was; d != 0 && (d > 0) == (now > was) { // the sign says it did not overflow
			out = append(out, Usage{
				Namespace: item.GetS(new, item.AttrNamespace), Entity: entity, Resource: item.GetS(new, item.AttrResource),
				Limit: strings.TrimPrefix(prefix, "b_"), Millitokens: d,
			})
		}
	}
	slices.SortFunc(out, func(a, b Usage) int { return strings.Compare(a.Limit, b.Limit) })
	return out
}

// isBucketPK reports whether pk is a bucket item's partition key
// (n{ns}/BUCKET#…).
func isBucketPK(pk string) bool {
	_, rest, ok := strings.Cut(pk, "/")
	return ok && strings.HasPrefix(pk, "n") && strings.HasPrefix(rest, "BUCKET#")
}
