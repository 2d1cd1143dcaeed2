package usage

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/item"
)

// MaxWindowScanPages bounds the pages one WindowUsage scan reads: a page
// is at most 1 MB of the table, read eventually consistent (128 read
// units), so a scan costs at most 12,800 read units.
const MaxWindowScanPages = 100

// WindowUsage returns the snapshots of every entity of namespace ns (the
// store's when empty) that used resource in the window w holding at: a
// Scan of the table (eventually consistent, paged) keeping the items whose
// sort key is the window's snapshot key (#USAGE#{resource}#{window key})
// and whose namespace is ns. The table keeps snapshots by entity, not by
// window, so the scan reads the whole table: its cost is the table's size
// (128 read units a MB), however few snapshots match. It stops after
// maxPages pages (MaxWindowScanPages when 0 or less); complete is false
// when it stopped before the table's end.
func (s *Store) WindowUsage(ctx context.Context, ns, resource string, w Window, at time.Time, maxPages int) (snaps []Snapshot, complete bool, err error) {
	if w.prefix() == "" {
		return nil, false, fmt.Errorf("dynamo: usage: unknown window %q", w)
	}
	if ns == "" {
		ns = s.t.Namespace
	}
	if maxPages <= 0 {
		maxPages = MaxWindowScanPages
	}
	e := item.NewExpr()
	filter := e.Name(item.AttrSK) + " = " + e.Value(item.StrAV(usageSK(resource, w.Key(at)))) +
		" AND " + e.Name(item.AttrNamespace) + " = " + e.Value(item.StrAV(ns))
	var start map[string]types.AttributeValue
	for range maxPages {
		cctx, cancel := s.t.Call(ctx)
		res, err := s.t.API.Scan(cctx, &dynamodb.ScanInput{
			TableName: aws.String(s.t.Name), ExclusiveStartKey: start, FilterExpression: aws.String(filter),
			ExpressionAttributeNames: e.AttrNames(), ExpressionAttributeValues: e.AttrValues(),
		})
		cancel()
		if err != nil {
			return nil, false, dynamo.Classify("usage scan "+s.t.Name, err)
		}
		for _, it := range res.Items {
			if snap, ok := decodeSnapshot(it, w); ok {
				snaps = append(snaps, snap)
			}
		}
		if start = res.LastEvaluatedKey; len(start) == 0 {
			return snaps, true, nil
		}
	}
	return snaps, false, nil
}
