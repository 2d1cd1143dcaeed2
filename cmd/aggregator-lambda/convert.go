package main

import (
	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/dynalimit/dynalimit/pkg/dynamo/usage"
)

// record converts a Lambda stream record into the aggregator's.
func record(r events.DynamoDBEventRecord) usage.Record {
	return usage.Record{
		ID:       r.EventID,
		Name:     r.EventName,
		Sequence: r.Change.SequenceNumber,
		At:       r.Change.ApproximateCreationDateTime.UTC(),
		Keys:     item(r.Change.Keys),
		Old:      item(r.Change.OldImage),
		New:      item(r.Change.NewImage),
	}
}

// item converts an image; nil stays nil.
func item(m map[string]events.DynamoDBAttributeValue) map[string]types.AttributeValue {
	if m == nil {
		return nil
	}
	out := make(map[string]types.AttributeValue, len(m))
	for k, v := range m {
		out[k] = value(v)
	}
	return out
}

// value converts one attribute value, of any type, recursively.
func value(v events.DynamoDBAttributeValue) types.AttributeValue {
	switch v.DataType() {
	case events.DataTypeString:
		return &types.AttributeValueMemberS{Value: v.String()}
	case events.DataTypeNumber:
		return &types.AttributeValueMemberN{Value: v.Number()}
	case events.DataTypeBinary:
		return &types.AttributeValueMemberB{Value: v.Binary()}
	case events.DataTypeBoolean:
		return &types.AttributeValueMemberBOOL{Value: v.Boolean()}
	case events.DataTypeStringSet:
		return &types.AttributeValueMemberSS{Value: v.StringSet()}
	case events.DataTypeNumberSet:
		return &types.AttributeValueMemberNS{Value: v.NumberSet()}
	case events.DataTypeBinarySet:
		return &types.AttributeValueMemberBS{Value: v.BinarySet()}
	case events.DataTypeList:
		l := v.List()
		out := make([]types.AttributeValue, len(l))
		for i, e := range l {
			out[i] = value(e)
		}
		return &types.AttributeValueMemberL{Value: out}
	case events.DataTypeMap:
		return &types.AttributeValueMemberM{Value: item(v.Map())}
	}
	return &types.AttributeValueMemberNULL{Value: true}
}
