package admin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/item"
)

// CreateTable creates table with GSI1 (parent → children, the one index a
// code path queries), a NEW_AND_OLD_IMAGES stream, on-demand billing and TTL
// on "ttl", waits until it is active and writes the schema version record.
// It is idempotent. Meant for development and tests; production tables come
// from cloudformation/.
func CreateTable(ctx context.Context, api dynamo.API, table string) error {
	str := types.ScalarAttributeTypeS
	attrs := []types.AttributeDefinition{
		{AttributeName: aws.String(item.AttrPK), AttributeType: str}, {AttributeName: aws.String(item.AttrSK), AttributeType: str},
		{AttributeName: aws.String(item.AttrGSI1PK), AttributeType: str}, {AttributeName: aws.String(item.AttrGSI1SK), AttributeType: str},
	}
	gsis := []types.GlobalSecondaryIndex{{
		IndexName:  aws.String("GSI1"),
		KeySchema:  []types.KeySchemaElement{{AttributeName: aws.String(item.AttrGSI1PK), KeyType: types.KeyTypeHash}, {AttributeName: aws.String(item.AttrGSI1SK), KeyType: types.KeyTypeRange}},
		Projection: &types.Projection{ProjectionType: types.ProjectionTypeAll},
	}}
	_, err := api.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:              aws.String(table),
		AttributeDefinitions:   attrs,
		KeySchema:              []types.KeySchemaElement{{AttributeName: aws.String(item.AttrPK), KeyType: types.KeyTypeHash}, {AttributeName: aws.String(item.AttrSK), KeyType: types.KeyTypeRange}},
		GlobalSecondaryIndexes: gsis,
		BillingMode:            types.BillingModePayPerRequest,
		StreamSpecification:    &types.StreamSpecification{StreamEnabled: aws.Bool(true), StreamViewType: types.StreamViewTypeNewAndOldImages},
	})
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return dynamo.Classify("create table "+table, err)
	}
	for {
		out, err := api.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
		if err != nil {
			return dynamo.Classify("describe table "+table, err)
		}
		if out.Table != nil && out.Table.TableStatus == types.TableStatusActive {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("dynamo: create table %s: %w: %w", table, dynamo.ErrUnavailable, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
	_, err = api.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName:               aws.String(table),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{AttributeName: aws.String(item.AttrTTL), Enabled: aws.Bool(true)},
	})
	if err != nil && !strings.Contains(err.Error(), "already enabled") {
		return dynamo.Classify("enable ttl on "+table, err)
	}
	it := item.Key(item.VersionPK, item.SKVersion)
	it["schema"] = item.StrAV(dynamo.SchemaVersion)
	_, err = api.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(table), Item: it,
		ConditionExpression:       aws.String("attribute_not_exists(#pk) OR #v = :v"),
		ExpressionAttributeNames:  map[string]string{"#pk": item.AttrPK, "#v": "schema"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":v": item.StrAV(dynamo.SchemaVersion)},
	})
	if err != nil {
		if errors.Is(dynamo.Classify("", err), dynamo.ErrCondition) {
			return fmt.Errorf("dynamo: create table %s: it holds another schema version: %w", table, item.ErrSchema)
		}
		return dynamo.Classify("put schema version", err)
	}
	return nil
}
