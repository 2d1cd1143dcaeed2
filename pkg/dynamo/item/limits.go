package item

import (
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// AttrLimits is the attribute of a config record (of the system, a
// resource, an entity or an entity and a resource) that holds its stored
// limits: a map by limit name of capacity, refill amount and refill period.
const AttrLimits = "limits"

// DecodeLimits decodes the limits a config record stores (AttrLimits), by
// name, skipping any that is not a valid limit; nil when it has none.
func DecodeLimits(it map[string]types.AttributeValue) map[string]tokenbucket.Limit {
	m, ok := it[AttrLimits].(*types.AttributeValueMemberM)
	if !ok {
		return nil
	}
	out := map[string]tokenbucket.Limit{}
	for name, av := range m.Value {
		lm, ok := av.(*types.AttributeValueMemberM)
		if !ok {
			continue
		}
		l, err := tokenbucket.NewLimit(
			tokenbucket.Millitokens(GetN(lm.Value, "cp")),
			tokenbucket.Millitokens(GetN(lm.Value, "ra")),
			time.Duration(GetN(lm.Value, "rp"))*time.Millisecond)
		if err == nil {
			out[name] = l
		}
	}
	return out
}

// EncodeLimits encodes limits by name as a config record's AttrLimits.
func EncodeLimits(m map[string]tokenbucket.Limit) types.AttributeValue {
	out := map[string]types.AttributeValue{}
	for name, l := range m {
		out[name] = &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
			"cp": NumAV(int64(l.Capacity)), "ra": NumAV(int64(l.RefillAmount)), "rp": NumAV(l.RefillPeriod.Milliseconds()),
		}}
	}
	return &types.AttributeValueMemberM{Value: out}
}
