package dynamo

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// SchemaVersion is the version of the key schema and item layout this
// package reads and writes; NewStore refuses a table with another.
const SchemaVersion = "1"

// CreateTable creates table with its four GSIs, a NEW_AND_OLD_IMAGES stream,
// on-demand billing and TTL on "ttl", waits until it is active and writes
// the schema version record. It is idempotent. Meant for development and
// tests; production tables come from cloudformation/.
func CreateTable(ctx context.Context, api API, table string) error {
	str := types.ScalarAttributeTypeS
	attrs := []types.AttributeDefinition{{AttributeName: aws.String(attrPK), AttributeType: str}, {AttributeName: aws.String(attrSK), AttributeType: str}}
	var gsis []types.GlobalSecondaryIndex
	// GSI2 is KEYS_ONLY like GSI3 and GSI4: a bucket update that changes no
	// index key then writes no index, and costs one write unit, not two.
	for i, proj := range []types.ProjectionType{types.ProjectionTypeAll, types.ProjectionTypeKeysOnly, types.ProjectionTypeKeysOnly, types.ProjectionTypeKeysOnly} {
		pk, sk := fmt.Sprintf("GSI%dPK", i+1), fmt.Sprintf("GSI%dSK", i+1)
		attrs = append(attrs, types.AttributeDefinition{AttributeName: aws.String(pk), AttributeType: str}, types.AttributeDefinition{AttributeName: aws.String(sk), AttributeType: str})
		gsis = append(gsis, types.GlobalSecondaryIndex{
			IndexName:  aws.String(fmt.Sprintf("GSI%d", i+1)),
			KeySchema:  []types.KeySchemaElement{{AttributeName: aws.String(pk), KeyType: types.KeyTypeHash}, {AttributeName: aws.String(sk), KeyType: types.KeyTypeRange}},
			Projection: &types.Projection{ProjectionType: proj},
		})
	}
	_, err := api.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:              aws.String(table),
		AttributeDefinitions:   attrs,
		KeySchema:              []types.KeySchemaElement{{AttributeName: aws.String(attrPK), KeyType: types.KeyTypeHash}, {AttributeName: aws.String(attrSK), KeyType: types.KeyTypeRange}},
		GlobalSecondaryIndexes: gsis,
		BillingMode:            types.BillingModePayPerRequest,
		StreamSpecification:    &types.StreamSpecification{StreamEnabled: aws.Bool(true), StreamViewType: types.StreamViewTypeNewAndOldImages},
	})
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return classify("create table "+table, err)
	}
	for {
		out, err := api.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
		if err != nil {
			return classify("describe table "+table, err)
		}
		if out.Table != nil && out.Table.TableStatus == types.TableStatusActive {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("dynamo: create table %s: %w: %w", table, ErrUnavailable, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
	_, err = api.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName:               aws.String(table),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{AttributeName: aws.String(attrTTL), Enabled: aws.Bool(true)},
	})
	if err != nil && !strings.Contains(err.Error(), "already enabled") {
		return classify("enable ttl on "+table, err)
	}
	item := itemKey(versionPK, skVersion)
	item["schema"] = strAV(SchemaVersion)
	_, err = api.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(table), Item: item,
		ConditionExpression:       aws.String("attribute_not_exists(#pk) OR #v = :v"),
		ExpressionAttributeNames:  map[string]string{"#pk": attrPK, "#v": "schema"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":v": strAV(SchemaVersion)},
	})
	if err != nil {
		if errors.Is(classify("", err), errCondition) {
			return fmt.Errorf("dynamo: create table %s: it holds another schema version: %w", table, ErrSchema)
		}
		return classify("put schema version", err)
	}
	return nil
}

func (s *Store) checkVersion(ctx context.Context) error {
	item, err := s.getItem(ctx, versionPK, skVersion)
	if err != nil {
		return err
	}
	if v := getS(item, "schema"); v != SchemaVersion {
		if v == "" {
			return fmt.Errorf("dynamo: table %s has no schema version record (run `ratelimit table create`): %w", s.cfg.Table, ErrSchema)
		}
		return fmt.Errorf("dynamo: table %s has schema version %q, this build reads %q: %w", s.cfg.Table, v, SchemaVersion, ErrSchema)
	}
	return nil
}

// Adjust applies delta to one limit of a bucket with an unconditional ADD:
// a positive delta debits (the request cost more than estimated, possibly
// into debt), a negative one credits (refund; any excess over capacity is
// never consumed and is clamped at the next refill). With several shards it
// works on one shard chosen at random. Adjusting a bucket that does not
// exist does nothing.
func (s *Store) Adjust(ctx context.Context, key cascade.Key, limit string, delta tokenbucket.Millitokens) error {
	if s.closed.Load() {
		return errClosed
	}
	if delta == 0 {
		return nil
	}
	ns := s.ns(key)
	n := s.shardCount(baseKey(ns, key))
	pk := bucketPK(ns, key.Entity, key.Resource, s.pickShard(n))
	e := newExpr()
	tk := limitAttr(limit, fieldTokens)
	e.condition("attribute_exists(" + e.name(tk) + ")")
	e.addNum(tk, -int64(delta))
	e.addNum(limitAttr(limit, fieldConsumed), int64(delta))
	_, _, err := s.update(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(s.cfg.Table), Key: itemKey(pk, skState),
		UpdateExpression: e.update(), ConditionExpression: e.conditionExpr(),
		ExpressionAttributeNames: e.attrNames(), ExpressionAttributeValues: e.attrValues(),
		ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal,
	})
	s.forgetImage(pk)
	return err
}

// Status reads a bucket's limits without changing them. With several shards
// it reads one shard chosen at random and reports its share times the shard
// count. Limits absent from the table are full.
func (s *Store) Status(ctx context.Context, key cascade.Key, limits map[string]tokenbucket.Limit) (map[string]cascade.Status, error) {
	if s.closed.Load() {
		return nil, errClosed
	}
	ns := s.ns(key)
	n := s.shardCount(baseKey(ns, key))
	pk := bucketPK(ns, key.Entity, key.Resource, s.pickShard(n))
	cctx, cancel := s.call(ctx)
	defer cancel()
	out, err := s.api.GetItem(cctx, &dynamodb.GetItemInput{TableName: aws.String(s.cfg.Table), Key: itemKey(pk, skState), ConsistentRead: aws.Bool(true), ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal})
	if err != nil {
		return nil, classify("get "+s.cfg.Table, err)
	}
	img := decodeImage(out.Item)
	if img.exists && img.shardCount > n {
		s.learnShards(baseKey(ns, key), img.shardCount)
		n = img.shardCount
	}
	now := s.nowMs()
	res := make(map[string]cascade.Status, len(limits))
	for name, full := range limits {
		l := perShard(full, n)
		st := startState(img, l, now)
		if li, ok := img.has(limitPrefix(name)); ok {
			st = li.state()
		}
		r := l.Refill(st, now)
		res[name] = cascade.Status{
			OK:         r.Tokens > 0,
			Remaining:  r.Tokens * tokenbucket.Millitokens(n),
			RetryAfter: l.RetryAfter(st, 1, now),
			ResetAfter: l.TimeToFull(st, now),
		}
	}
	return res, nil
}

// SetShards pre-shards a bucket that does not exist yet into n shards
// (a power of two up to MaxShards), each created full with its share of
// every limit. Meant for known hot buckets and tests.
func (s *Store) SetShards(ctx context.Context, key cascade.Key, n int, limits map[string]tokenbucket.Limit) error {
	if n < 1 || n > MaxShards || n&(n-1) != 0 {
		return fmt.Errorf("dynamo: shards: %d is not a power of two between 1 and %d", n, MaxShards)
	}
	ns := s.ns(key)
	it := &item{key: key, ns: ns, base: baseKey(ns, key), n: n}
	now := s.nowMs()
	tx := make([]types.TransactWriteItem, n)
	for sh := 0; sh < n; sh++ {
		e := newExpr()
		s.setMeta(e, it, sh, n)
		for name, full := range limits {
			l := perShard(full, n)
			lw := limitWrite{prefix: limitPrefix(name), shape: l, s: sym{fixed: true, off: int64(l.Capacity), last: now}}
			writeLimit(e, &lw, false)
		}
		e.setAttr(attrRF, numAV(now))
		e.condition("attribute_not_exists(" + e.name(attrPK) + ")")
		tx[sh] = types.TransactWriteItem{Update: &types.Update{
			TableName: aws.String(s.cfg.Table), Key: itemKey(bucketPK(ns, key.Entity, key.Resource, sh), skState),
			UpdateExpression: e.update(), ConditionExpression: e.conditionExpr(),
			ExpressionAttributeNames: e.attrNames(), ExpressionAttributeValues: e.attrValues(),
		}}
	}
	cctx, cancel := s.adminCall(ctx)
	defer cancel()
	if _, err := s.api.TransactWriteItems(cctx, &dynamodb.TransactWriteItemsInput{TransactItems: tx}); err != nil {
		return classify("pre-shard bucket", err)
	}
	s.learnShards(it.base, n)
	return nil
}
