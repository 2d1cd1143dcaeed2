package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/dynalimit/dynalimit/pkg/dynamo/usage"
	"github.com/sirupsen/logrus"
)

// event is a batch as Lambda delivers it: three bucket writes (one of a
// sharded bucket's second shard) and an entity record.
const event = `{"Records": [
 {"eventID": "ev-1", "eventName": "INSERT", "eventSource": "aws:dynamodb", "awsRegion": "eu-west-1",
  "dynamodb": {"ApproximateCreationDateTime": 1795703400, "SequenceNumber": "100", "StreamViewType": "NEW_AND_OLD_IMAGES",
   "Keys": {"PK": {"S": "nacme/BUCKET#team#api#0"}, "SK": {"S": "#STATE"}},
   "NewImage": {"PK": {"S": "nacme/BUCKET#team#api#0"}, "SK": {"S": "#STATE"}, "ns": {"S": "acme"}, "entity": {"S": "team"}, "resource": {"S": "api"},
    "shard_count": {"N": "1"}, "b_rpm_x": {"N": "-5"}, "b_rpm_tc": {"N": "1000"}, "b_rpm_l": {"S": "60000/60000/60000"}, "empty_start": {"BOOL": true},
    "wt": {"L": [{"N": "1"}, {"S": "x"}]}, "m": {"M": {"a": {"NULL": true}}}, "ss": {"SS": ["a"]}, "b": {"B": "AAE="}}}},
 {"eventID": "ev-2", "eventName": "MODIFY", "eventSource": "aws:dynamodb",
  "dynamodb": {"ApproximateCreationDateTime": 1795703401, "SequenceNumber": "200",
   "Keys": {"PK": {"S": "nacme/BUCKET#other#api#1"}, "SK": {"S": "#STATE"}},
   "OldImage": {"PK": {"S": "nacme/BUCKET#other#api#1"}, "ns": {"S": "acme"}, "entity": {"S": "other"}, "resource": {"S": "api"}, "b_rpm_x": {"N": "0"}, "b_rpm_tc": {"N": "2000"}},
   "NewImage": {"PK": {"S": "nacme/BUCKET#other#api#1"}, "ns": {"S": "acme"}, "entity": {"S": "other"}, "resource": {"S": "api"}, "b_rpm_x": {"N": "1"}, "b_rpm_tc": {"N": "5000"}}}},
 {"eventID": "ev-3", "eventName": "INSERT", "eventSource": "aws:dynamodb",
  "dynamodb": {"ApproximateCreationDateTime": 1795703402, "SequenceNumber": "300",
   "Keys": {"PK": {"S": "nacme/ENTITY#team"}, "SK": {"S": "#META"}},
   "NewImage": {"PK": {"S": "nacme/ENTITY#team"}, "SK": {"S": "#META"}, "ns": {"NS": ["1", "2"]}}}}
]}`

// fakeWriter fails the records named and remembers what it was given.
type fakeWriter struct {
	fail map[string]bool
	got  []usage.Entry
}

func (f *fakeWriter) ApplyUsage(_ context.Context, recs []usage.Entry) (usage.Report, error) {
	f.got = append(f.got, recs...)
	var rep usage.Report
	for _, r := range recs {
		if f.fail[r.ID] {
			rep.Failed = append(rep.Failed, r.ID)
			continue
		}
		rep.Applied++
	}
	if len(rep.Failed) > 0 {
		return rep, errors.New("throttled")
	}
	return rep, nil
}

func quiet() *logrus.Entry {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return logrus.NewEntry(l)
}

func decode(t *testing.T) events.DynamoDBEvent {
	t.Helper()
	var ev events.DynamoDBEvent
	if err := json.Unmarshal([]byte(event), &ev); err != nil {
		t.Fatalf("json.Unmarshal(event) = %v", err)
	}
	return ev
}

// TestHandleReportsFailed: the record the writer fails is reported by its
// sequence number, and the others are not; the writer got each record's
// usage, converted from the event's attribute values.
func TestHandleReportsFailed(t *testing.T) {
	w := &fakeWriter{fail: map[string]bool{"ev-2": true}}
	opened := 0
	h := &handler{log: quiet(), open: func(context.Context) (usage.Writer, error) { opened++; return w, nil }}
	resp, err := h.Handle(context.Background(), decode(t))
	if err != nil {
		t.Fatalf("Handle() = %v", err)
	}
	want := []events.DynamoDBBatchItemFailure{{ItemIdentifier: "200"}}
	if !reflect.DeepEqual(resp.BatchItemFailures, want) {
		t.Errorf("Handle().BatchItemFailures = %+v, want %+v", resp.BatchItemFailures, want)
	}
	at := time.Unix(1795703400, 0).UTC()
	wantGot := []usage.Entry{
		{ID: "ev-1", At: at, Usage: []usage.Usage{{Namespace: "acme", Entity: "team", Resource: "api", Limit: "rpm", Millitokens: 1000}}},
		{ID: "ev-2", At: at.Add(time.Second), Usage: []usage.Usage{{Namespace: "acme", Entity: "other", Resource: "api", Limit: "rpm", Millitokens: 3000}}},
		{ID: "ev-3", At: at.Add(2 * time.Second)},
	}
	if !reflect.DeepEqual(w.got, wantGot) {
		t.Errorf("writer got %+v, want %+v", w.got, wantGot)
	}
	w.fail = nil
	resp, err = h.Handle(context.Background(), decode(t))
	if err != nil || len(resp.BatchItemFailures) != 0 || opened != 1 {
		t.Errorf("Handle(again) = %+v, %v, opened %d times; want no failures, opened once", resp, err, opened)
	}
	if b, _ := json.Marshal(resp); string(b) != `{"batchItemFailures":[]}` {
		t.Errorf("response JSON = %s, want an empty batchItemFailures list", b)
	}
}

// TestHandleOpenFails: a batch that cannot start fails as a whole, and the
// next invocation tries to open the table again.
func TestHandleOpenFails(t *testing.T) {
	tries := 0
	h := &handler{log: quiet(), open: func(context.Context) (usage.Writer, error) {
		tries++
		if tries == 1 {
			return nil, errors.New("no credentials")
		}
		return &fakeWriter{}, nil
	}}
	if _, err := h.Handle(context.Background(), decode(t)); err == nil {
		t.Fatalf("Handle() with no table = nil error, want one")
	}
	if resp, err := h.Handle(context.Background(), decode(t)); err != nil || len(resp.BatchItemFailures) != 0 || tries != 2 {
		t.Errorf("Handle(again) = %+v, %v after %d opens, want success after 2", resp, err, tries)
	}
}

// TestValue converts every attribute type.
func TestValue(t *testing.T) {
	in := map[string]events.DynamoDBAttributeValue{
		"s": events.NewStringAttribute("x"), "n": events.NewNumberAttribute("-1.5"), "b": events.NewBinaryAttribute([]byte{1}),
		"t": events.NewBooleanAttribute(true), "ss": events.NewStringSetAttribute([]string{"a"}), "ns": events.NewNumberSetAttribute([]string{"1"}),
		"bs": events.NewBinarySetAttribute([][]byte{{2}}), "null": events.NewNullAttribute(),
		"l": events.NewListAttribute([]events.DynamoDBAttributeValue{events.NewStringAttribute("y")}),
		"m": events.NewMapAttribute(map[string]events.DynamoDBAttributeValue{"k": events.NewNumberAttribute("2")}),
	}
	want := map[string]types.AttributeValue{
		"s": &types.AttributeValueMemberS{Value: "x"}, "n": &types.AttributeValueMemberN{Value: "-1.5"}, "b": &types.AttributeValueMemberB{Value: []byte{1}},
		"t": &types.AttributeValueMemberBOOL{Value: true}, "ss": &types.AttributeValueMemberSS{Value: []string{"a"}}, "ns": &types.AttributeValueMemberNS{Value: []string{"1"}},
		"bs": &types.AttributeValueMemberBS{Value: [][]byte{{2}}}, "null": &types.AttributeValueMemberNULL{Value: true},
		"l": &types.AttributeValueMemberL{Value: []types.AttributeValue{&types.AttributeValueMemberS{Value: "y"}}},
		"m": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"k": &types.AttributeValueMemberN{Value: "2"}}},
	}
	if got := item(in); !reflect.DeepEqual(got, want) {
		t.Errorf("item() = %#v, want %#v", got, want)
	}
	if item(nil) != nil {
		t.Errorf("item(nil) != nil")
	}
}
