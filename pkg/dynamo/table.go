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
)

// SchemaVersion is the version of the key schema and item layout this
// package reads and writes; NewStore refuses a table with another. Version 2
// stores each limit as a level (tokenbucket.State); tables of version 1
// (token counts with a last-refill time) must be recreated.
const SchemaVersion = "2"

// CreateTable creates table with GSI1 (parent → children, the one index a
// code path queries), a NEW_AND_OLD_IMAGES stream, on-demand billing and TTL
// on "ttl", waits until it is active and writes the schema version record.
// It is idempotent. Meant for development and tests; production tables come
// from cloudformation/.
func CreateTable(ctx context.Context, api API, table string) error {
	str := types.ScalarAttributeTypeS
	attrs := []types.AttributeDefinition{
		{AttributeName: aws.String(attrPK), AttributeType: str}, {AttributeName: aws.String(attrSK), AttributeType: str},
		{AttributeName: aws.String(attrGSI1PK), AttributeType: str}, {AttributeName: aws.String(attrGSI1SK), AttributeType: str},
	}
	gsis := []types.GlobalSecondaryIndex{{
		IndexName:  aws.String("GSI1"),
		KeySchema:  []types.KeySchemaElement{{AttributeName: aws.String(attrGSI1PK), KeyType: types.KeyTypeHash}, {AttributeName: aws.String(attrGSI1SK), KeyType: types.KeyTypeRange}},
		Projection: &types.Projection{ProjectionType: types.ProjectionTypeAll},
	}}
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
