package usage

import (
	"context"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/dynalimit/dynalimit/pkg/dynamo/item"
)

// Usage returns the usage snapshots of one entity (its id, as in
// PutEntity) in window w that end after since, oldest first and, within a
// window, by resource: one Query of the entity's partition (paged), on the
// sort keys of one resource's snapshots in w, or every resource's when
// resource is empty. ns empty is the store's namespace. Each snapshot's
// Limits are by limit name (a name longer than 64 bytes escaped reads as
// its hash, "~…"); the values are millitokens.
func (s *Store) Usage(ctx context.Context, ns, entity, resource string, w Window, since time.Time) ([]Snapshot, error) {
	if w.prefix() == "" {
		return nil, fmt.Errorf("dynamo: usage: unknown window %q", w)
	}
	if ns == "" {
		ns = s.t.Namespace
	}
	e := item.NewExpr()
	cond := e.Name(item.AttrPK) + " = " + e.Value(item.StrAV(item.EntityPK(ns, entity)))
	if resource != "" {
		lo := usageSK(resource, w.Key(since))
		hi := usageSK(resource, w.prefix()+"~") // '~' sorts after every digit
		cond += " AND " + e.Name(item.AttrSK) + " BETWEEN " + e.Value(item.StrAV(lo)) + " AND " + e.Value(item.StrAV(hi))
	} else {
		cond += " AND begins_with(" + e.Name(item.AttrSK) + ", " + e.Value(item.StrAV(skUsage)) + ")"
	}
	in := &dynamodb.QueryInput{
		TableName: aws.String(s.t.Name), KeyConditionExpression: aws.String(cond),
		ExpressionAttributeNames: e.AttrNames(), ExpressionAttributeValues: e.AttrValues(),
	}
	var out []Snapshot
	err := s.t.Query(ctx, "usage "+entity, in, func(items []map[string]types.AttributeValue) {
		for _, it := range items {
			if snap, ok := decodeSnapshot(it, w); ok && snap.Window.End(snap.Start).After(since) {
				out = append(out, snap)
			}
		}
	})
	if err != nil {
		return nil, err
	}
	sort.SliceStable(out, func(i, j int) bool {
		if !out[i].Start.Equal(out[j].Start) {
			return out[i].Start.Before(out[j].Start)
		}
		return out[i].Resource < out[j].Resource
	})
	return out, nil
}

// decodeSnapshot decodes a snapshot item of window w.
func decodeSnapshot(it map[string]types.AttributeValue, w Window) (Snapshot, bool) {
	win, start, ok := parseWindowKey(item.GetS(it, attrWindow))
	if !ok || win != w {
		return Snapshot{}, false
	}
	snap := Snapshot{
		Namespace: item.GetS(it, item.AttrNamespace), Entity: item.GetS(it, item.AttrEntity), Resource: item.GetS(it, item.AttrResource),
		Window: win, Start: start, Limits: map[string]int64{},
	}
	for name, av := range it {
		l, ok := strings.CutPrefix(name, usagePre)
		if !ok {
			continue
		}
		if v, ok := item.Number(av); ok {
			snap.Limits[unesc(l)] = v
		}
	}
	return snap, true
}

// unesc undoes esc for a component short enough to be stored escaped; a
// hashed one ("~…") stays as it is.
func unesc(s string) string {
	if strings.HasPrefix(s, "~") {
		return s
	}
	raw, err := url.PathUnescape(s)
	if err != nil {
		return s
	}
	return raw
}
