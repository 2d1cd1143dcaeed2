package streampoll

import (
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	st "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/dynalimit/dynalimit/pkg/dynamo/usage"
)

// record converts a stream record to the aggregator's.
func record(r st.Record) usage.Record {
	out := usage.Record{ID: deref(r.EventID), Name: string(r.EventName)}
	if d := r.Dynamodb; d != nil {
		out.Sequence = deref(d.SequenceNumber)
		if d.ApproximateCreationDateTime != nil {
			out.At = *d.ApproximateCreationDateTime
		}
		out.Keys, out.Old, out.New = item(d.Keys), item(d.OldImage), item(d.NewImage)
	}
	return out
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// item converts a stream image to the table API's attribute values.
func item(m map[string]st.AttributeValue) map[string]ddb.AttributeValue {
	if m == nil {
		return nil
	}
	out := make(map[string]ddb.AttributeValue, len(m))
	for k, v := range m {
		if c := value(v); c != nil {
			out[k] = c
		}
	}
	return out
}

// value converts one attribute value; nil for a kind it does not know.
func value(v st.AttributeValue) ddb.AttributeValue {
	switch x := v.(type) {
	case *st.AttributeValueMemberS:
		return &ddb.AttributeValueMemberS{Value: x.Value}
	case *st.AttributeValueMemberN:
		return &ddb.AttributeValueMemberN{Value: x.Value}
	case *st.AttributeValueMemberB:
		return &ddb.AttributeValueMemberB{Value: x.Value}
	case *st.AttributeValueMemberBOOL:
		return &ddb.AttributeValueMemberBOOL{Value: x.Value}
	case *st.AttributeValueMemberNULL:
		return &ddb.AttributeValueMemberNULL{Value: x.Value}
	case *st.AttributeValueMemberSS:
		return &ddb.AttributeValueMemberSS{Value: x.Value}
	case *st.AttributeValueMemberNS:
		return &ddb.AttributeValueMemberNS{Value: x.Value}
	case *st.AttributeValueMemberBS:
		return &ddb.AttributeValueMemberBS{Value: x.Value}
	case *st.AttributeValueMemberM:
		return &ddb.AttributeValueMemberM{Value: item(x.Value)}
	case *st.AttributeValueMemberL:
		l := make([]ddb.AttributeValue, 0, len(x.Value))
		for _, e := range x.Value {
			if c := value(e); c != nil {
				l = append(l, c)
			}
		}
		return &ddb.AttributeValueMemberL{Value: l}
	}
	return nil
}
