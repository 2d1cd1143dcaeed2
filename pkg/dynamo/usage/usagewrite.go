package usage

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/item"
)

const (
	// usageMarkerTTL is how long the marker of an applied stream record
	// lives: longer than a stream keeps a record (24 hours), so no
	// redelivery can outlive it.
	usageMarkerTTL = 48 * time.Hour
	// maxTxItems is the most items one TransactWriteItems holds.
	maxTxItems = 100
	// usageTries bounds the transactions of one group that conflicted or
	// were throttled before its records are reported failed.
	usageTries = 4

	skApplied  = "#APPLIED"
	skUsage    = "#USAGE#"
	attrWindow = "window"
	usagePre   = "u_" // a snapshot's limit attribute: "u_" + esc(limit)
)

// usageMarkerPK is the partition key of a stream record's marker (sort key
// skApplied): the table's own, one item per applied record.
func usageMarkerPK(id string) string { return item.SystemNS + "/STREAM#" + item.Esc(id) }

// usageSK is the sort key of a snapshot: #USAGE#{resource}#{window key}.
func usageSK(resource, windowKey string) string {
	return skUsage + item.Esc(resource) + "#" + windowKey
}

// snapshotAdd is what one transaction adds to one snapshot item.
type snapshotAdd struct {
	pk, sk   string
	ns       string
	entity   string
	resource string
	window   string
	ttl      int64
	limits   map[string]int64 // by escaped limit name
}

// usageGroup is the records of one transaction: a marker each, and the
// snapshot items they add to (each item once).
type usageGroup struct {
	recs  []Entry
	items map[string]*snapshotAdd // by pk+"|"+sk
}

// ApplyUsage adds the usage of stream records to their hourly, daily and
// monthly snapshots (n{ns}/ENTITY#{entity}, #USAGE#{resource}#{window}, an
// attribute per limit), each record at most once however often it is
// delivered. Records are grouped into transactions of at most 100 items:
// per record a Put of a marker (_/STREAM#{id}, #APPLIED, ttl 48 hours) on
// the condition that none exists, and per snapshot item one Update adding
// every record's millitokens (ADD) and setting its ttl (window end plus
// Config.UsageRetention). A transaction cancelled because a marker exists
// is sent again without that record (a duplicate); one that conflicted,
// was throttled or went unanswered (it may have landed: its markers then
// make the next try find its records duplicates) is sent again after a
// backoff, up to four tries. Records
// without usage are applied without a write. A record not applied is
// listed in the report's Failed (a later call may apply it) and the error
// says why; a record ID appearing twice in recs counts once.
func (s *Store) ApplyUsage(ctx context.Context, recs []Entry) (Report, error) {
	var rep Report
	var errs []error
	g := s.newUsageGroup()
	for _, r := range s.uniqueRecords(recs, &rep) {
		adds := s.snapshotsOf(r)
		if !g.fits(r, adds) {
			errs = append(errs, s.applyGroup(ctx, g, &rep))
			g = s.newUsageGroup()
		}
		if !g.fits(r, adds) {
			rep.Failed = append(rep.Failed, r.ID)
			errs = append(errs, fmt.Errorf("dynamo: usage of record %s: %d snapshot items exceed a transaction", r.ID, len(adds)))
			continue
		}
		g.add(r, adds)
	}
	if len(g.recs) > 0 {
		errs = append(errs, s.applyGroup(ctx, g, &rep))
	}
	return rep, errors.Join(errs...)
}

// uniqueRecords returns the records of recs that have usage, each ID once,
// ordered by the first snapshot item each adds to (so that a group holds
// few items); it counts the others in rep: an ID seen before is a
// duplicate, a record without usage is applied.
func (s *Store) uniqueRecords(recs []Entry, rep *Report) []Entry {
	seen := make(map[string]bool, len(recs))
	out := make([]Entry, 0, len(recs))
	for _, r := range recs {
		switch {
		case seen[r.ID]:
			rep.Duplicates++
		case len(r.Usage) == 0:
			rep.Applied++
		default:
			out = append(out, r)
		}
		seen[r.ID] = true
	}
	first := func(r Entry) string {
		u := r.Usage[0]
		return item.NSPart(u.Namespace) + "|" + item.Esc(u.Entity) + "|" + item.Esc(u.Resource)
	}
	sort.SliceStable(out, func(i, j int) bool { return first(out[i]) < first(out[j]) })
	return out
}

func (s *Store) newUsageGroup() *usageGroup {
	return &usageGroup{items: map[string]*snapshotAdd{}}
}

// snapshotsOf lists the snapshot items record r adds to, each once, with
// what it adds.
func (s *Store) snapshotsOf(r Entry) []*snapshotAdd {
	var out []*snapshotAdd
	index := map[string]*snapshotAdd{}
	for _, u := range r.Usage {
		for _, w := range Windows {
			key := w.Key(r.At)
			pk, sk := item.EntityPK(u.Namespace, u.Entity), usageSK(u.Resource, key)
			a := index[pk+"|"+sk]
			if a == nil {
				ttl := w.End(r.At).Add(s.retention).Unix()
				a = &snapshotAdd{pk: pk, sk: sk, ns: u.Namespace, entity: u.Entity, resource: u.Resource, window: key, ttl: ttl, limits: map[string]int64{}}
				index[pk+"|"+sk] = a
				out = append(out, a)
			}
			a.limits[u.Limit] += u.Millitokens
		}
	}
	return out
}

// fits reports whether r, adding to adds, can join the group within one
// transaction.
func (g *usageGroup) fits(r Entry, adds []*snapshotAdd) bool {
	n := len(g.recs) + 1 + len(g.items)
	for _, a := range adds {
		if g.items[a.pk+"|"+a.sk] == nil {
			n++
		}
	}
	return n <= maxTxItems
}

// add puts r in the group, merging its additions into the group's items.
func (g *usageGroup) add(r Entry, adds []*snapshotAdd) {
	g.recs = append(g.recs, r)
	for _, a := range adds {
		have := g.items[a.pk+"|"+a.sk]
		if have == nil {
			g.items[a.pk+"|"+a.sk] = a
			continue
		}
		for l, v := range a.limits {
			have.limits[l] += v
		}
	}
}

// without returns the group less the records whose IDs are in drop.
func (g *usageGroup) without(s *Store, drop map[string]bool) *usageGroup {
	out := s.newUsageGroup()
	for _, r := range g.recs {
		if !drop[r.ID] {
			out.add(r, s.snapshotsOf(r))
		}
	}
	return out
}

// applyGroup writes one group, again without the records found applied
// already, and again after a conflict or throttling, up to usageTries.
func (s *Store) applyGroup(ctx context.Context, g *usageGroup, rep *Report) error {
	var last error
	for attempt := 0; attempt < usageTries && len(g.recs) > 0; {
		tx, items := s.usageTx(g)
		cctx, cancel := s.t.Call(ctx)
		out, err := s.t.API.TransactWriteItems(cctx, &dynamodb.TransactWriteItemsInput{TransactItems: tx, ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal})
		cancel()
		if err == nil {
			rep.Applied += len(g.recs)
			rep.Writes += items
			for _, c := range out.ConsumedCapacity {
				rep.WriteUnits += aws.ToFloat64(c.CapacityUnits)
			}
			return nil
		}
		if dup := duplicateMarkers(err, g); len(dup) > 0 {
			rep.Duplicates += len(dup)
			g = g.without(s, dup)
			continue // not a failed try: the group shrank
		}
		last = dynamo.Classify("apply usage", err)
		attempt++
		if !dynamo.Retryable(last) || !dynamo.Sleep(ctx, dynamo.Backoff(attempt+3)) {
			break
		}
	}
	if len(g.recs) == 0 {
		return nil
	}
	for _, r := range g.recs {
		rep.Failed = append(rep.Failed, r.ID)
	}
	return fmt.Errorf("dynamo: apply usage of %d records: %w", len(g.recs), last)
}

// duplicateMarkers returns the IDs of the group's records whose marker a
// cancelled transaction found already there.
func duplicateMarkers(err error, g *usageGroup) map[string]bool {
	var tce *types.TransactionCanceledException
	if !errors.As(err, &tce) || len(tce.CancellationReasons) < len(g.recs) {
		return nil
	}
	dup := map[string]bool{}
	for i, r := range g.recs {
		if aws.ToString(tce.CancellationReasons[i].Code) == "ConditionalCheckFailed" {
			dup[r.ID] = true
		}
	}
	return dup
}

// usageTx builds a group's transaction: the markers first, in record
// order, then the snapshot updates in key order. It returns the number of
// snapshot updates too.
func (s *Store) usageTx(g *usageGroup) ([]types.TransactWriteItem, int) {
	ttl := s.t.Now().UnixMilli()/1000 + int64(usageMarkerTTL.Seconds())
	tx := make([]types.TransactWriteItem, 0, len(g.recs)+len(g.items))
	for _, r := range g.recs {
		e := item.NewExpr()
		e.Condition("attribute_not_exists(" + e.Name(item.AttrPK) + ")")
		it := item.Key(usageMarkerPK(r.ID), skApplied)
		it[item.AttrTTL] = item.NumAV(ttl)
		tx = append(tx, types.TransactWriteItem{Put: &types.Put{
			TableName: aws.String(s.t.Name), Item: it,
			ConditionExpression: e.ConditionExpr(), ExpressionAttributeNames: e.AttrNames(),
		}})
	}
	keys := make([]string, 0, len(g.items))
	for k := range g.items {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		tx = append(tx, s.snapshotUpdate(g.items[k]))
	}
	return tx, len(keys)
}

// snapshotUpdate adds a's millitokens to its snapshot item, creating it.
func (s *Store) snapshotUpdate(a *snapshotAdd) types.TransactWriteItem {
	e := item.NewExpr()
	e.SetAttr(item.AttrNamespace, item.StrAV(a.ns))
	e.SetAttr(item.AttrEntity, item.StrAV(a.entity))
	e.SetAttr(item.AttrResource, item.StrAV(a.resource))
	e.SetAttr(attrWindow, item.StrAV(a.window))
	e.SetAttr(item.AttrTTL, item.NumAV(a.ttl))
	limits := make([]string, 0, len(a.limits))
	for l := range a.limits {
		limits = append(limits, l)
	}
	sort.Strings(limits)
	for _, l := range limits {
		e.AddNum(usagePre+l, a.limits[l])
	}
	return types.TransactWriteItem{Update: &types.Update{
		TableName: aws.String(s.t.Name), Key: item.Key(a.pk, a.sk),
		UpdateExpression: e.Update(), ExpressionAttributeNames: e.AttrNames(), ExpressionAttributeValues: e.AttrValues(),
	}}
}
