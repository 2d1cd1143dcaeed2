package admin

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/item"
)

// batchWriteMax is the most requests one BatchWriteItem takes.
const batchWriteMax = 25

// purgeRetries bounds the tries of one batch whose items DynamoDB left
// unprocessed (throttling), with a backoff from 50 ms doubling to 2 s.
const purgeRetries = 10

// PurgeNamespace deletes every item of namespace name (its buckets,
// entities, stored limits, audit records, settlement markers): a Scan of
// the table filtered on the namespace's key prefix, a page at a time, each
// page's keys deleted by BatchWriteItem, 25 a call. No other namespace's
// item is read for more than its key nor written. It refuses a namespace
// the registry holds active (ErrNamespaceActive: delete it first). The
// namespace is then marked purged in the registry (registered first
// when it was not, an orphan), and an audit record ("namespace.purge",
// system scope of the namespace: with the registration's, the only items
// left) says who purged how many items and when. done, when not nil, is told the
// running count after each batch. Cost: the Scan reads the whole table
// (about one read unit per 8 KB), and a write unit per item deleted (of up
// to 1 KB). It can be run again after a failure: it deletes what is left.
func (s *Store) PurgeNamespace(ctx context.Context, name string, done func(deleted int)) (int, error) {
	if name == "" {
		return 0, errors.New("dynamo: purge: empty namespace name")
	}
	reg, err := s.Namespace(ctx, name)
	registered := err == nil
	switch {
	case err != nil && !errors.Is(err, dynamo.ErrNotFound):
		return 0, err
	case registered && reg.State == NamespaceActive:
		return 0, fmt.Errorf("dynamo: purge namespace %q: %w: delete it first ('ratelimit namespace delete %s')", name, ErrNamespaceActive, name)
	}
	deleted := 0
	err = s.scan(ctx, item.NSPart(name)+"/", []string{item.AttrPK, item.AttrSK}, func(items []map[string]types.AttributeValue) error {
		for len(items) > 0 {
			n := min(len(items), batchWriteMax)
			if err := s.deleteBatch(ctx, items[:n]); err != nil {
				return err
			}
			deleted += n
			items = items[n:]
			if done != nil {
				done(deleted)
			}
		}
		return nil
	})
	if err != nil {
		return deleted, err
	}
	before := "state=" + reg.State
	if !registered {
		// An orphan: registered now, so that the registry tells it was
		// purged and orphans no longer lists it for its audit record.
		if reg, err = s.RegisterNamespace(ctx, name); err != nil {
			return deleted, err
		}
		before = "unregistered"
	}
	if err := s.moveNamespace(ctx, reg, NamespacePurged, NamespaceActive, NamespaceDeleted, NamespacePurged); err != nil {
		return deleted, err
	}
	return deleted, s.writeAudit(ctx, name, Scope{System: true}, "namespace.purge", before, "state=purged, deleted "+strconv.Itoa(deleted)+" items")
}

// deleteBatch deletes keys (at most 25) by BatchWriteItem, sending again
// what DynamoDB leaves unprocessed.
func (s *Store) deleteBatch(ctx context.Context, keys []map[string]types.AttributeValue) error {
	reqs := make([]types.WriteRequest, len(keys))
	for i, k := range keys {
		reqs[i] = types.WriteRequest{DeleteRequest: &types.DeleteRequest{Key: item.Key(item.GetS(k, item.AttrPK), item.GetS(k, item.AttrSK))}}
	}
	wait := 50 * time.Millisecond
	for try := 1; ; try++ {
		cctx, cancel := s.t.Call(ctx)
		res, err := s.t.API.BatchWriteItem(cctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{s.t.Name: reqs}})
		cancel()
		if err != nil {
			return dynamo.Classify("purge: batch delete", err)
		}
		if reqs = res.UnprocessedItems[s.t.Name]; len(reqs) == 0 {
			return nil
		}
		if try == purgeRetries {
			return fmt.Errorf("dynamo: purge: %d deletes left unprocessed after %d tries: %w", len(reqs), try, dynamo.ErrThrottled)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("dynamo: purge: %w", ctx.Err())
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}
