package dynamotest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/admin"
)

// Serve starts an HTTP server speaking DynamoDB's JSON protocol in front of
// api (a Fake, or a type embedding one), for a process that talks to
// DynamoDB itself (a client built by dynamo.NewClient on the server's URL):
// GetItem and TransactWriteItems (Put and Update) are answered by api; any
// other operation is refused. An error of api is answered as DynamoDB
// would answer it (a cancelled transaction with its reasons, throttling,
// a missing table), anything else as a server error. It returns the
// server's URL; the server stops when t ends.
func Serve(t testing.TB, api dynamo.API) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, op, _ := strings.Cut(r.Header.Get("X-Amz-Target"), ".")
		var in map[string]json.RawMessage
		body, err := io.ReadAll(r.Body)
		if err == nil {
			err = json.Unmarshal(body, &in)
		}
		var out any
		if err == nil {
			out, err = serveOp(r.Context(), api, op, in)
		}
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		if err != nil {
			status, b := errorBody(err)
			w.WriteHeader(status)
			_, _ = w.Write(b)
			return
		}
		_ = json.NewEncoder(w).Encode(out)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// serveOp answers one operation.
func serveOp(ctx context.Context, api dynamo.API, op string, in map[string]json.RawMessage) (any, error) {
	switch op {
	case "GetItem":
		var p struct {
			TableName string
			Key       map[string]json.RawMessage
		}
		if err := remarshal(in, &p); err != nil {
			return nil, err
		}
		key, err := avMap(p.Key)
		if err != nil {
			return nil, err
		}
		got, err := api.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(p.TableName), Key: key, ConsistentRead: aws.Bool(true)})
		if err != nil {
			return nil, err
		}
		if got.Item == nil {
			return map[string]any{}, nil
		}
		return map[string]any{"Item": avMapJSON(got.Item)}, nil
	case "TransactWriteItems":
		return serveTransact(ctx, api, in)
	}
	return nil, &types.InternalServerError{Message: aws.String("dynamotest: Serve does not answer " + op)}
}

// txItemJSON is one item of a TransactWriteItems request.
type txItemJSON struct {
	TableName                 string
	Key, Item                 map[string]json.RawMessage
	ConditionExpression       *string
	UpdateExpression          *string
	ExpressionAttributeNames  map[string]string
	ExpressionAttributeValues map[string]json.RawMessage
}

func serveTransact(ctx context.Context, api dynamo.API, in map[string]json.RawMessage) (any, error) {
	var p struct {
		TransactItems []struct{ Put, Update *txItemJSON }
	}
	if err := remarshal(in, &p); err != nil {
		return nil, err
	}
	tx := make([]types.TransactWriteItem, len(p.TransactItems))
	for i, ti := range p.TransactItems {
		j := ti.Put
		if j == nil {
			j = ti.Update
		}
		if j == nil {
			return nil, errors.New("dynamotest: Serve answers Put and Update only")
		}
		key, err := avMap(j.Key)
		if err == nil && ti.Put != nil {
			key, err = avMap(j.Item)
		}
		values, verr := avMap(j.ExpressionAttributeValues)
		if err = errors.Join(err, verr); err != nil {
			return nil, err
		}
		if ti.Put != nil {
			tx[i].Put = &types.Put{TableName: aws.String(j.TableName), Item: key, ConditionExpression: j.ConditionExpression, ExpressionAttributeNames: j.ExpressionAttributeNames, ExpressionAttributeValues: values}
		} else {
			tx[i].Update = &types.Update{TableName: aws.String(j.TableName), Key: key, UpdateExpression: j.UpdateExpression, ConditionExpression: j.ConditionExpression, ExpressionAttributeNames: j.ExpressionAttributeNames, ExpressionAttributeValues: values}
		}
	}
	out, err := api.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: tx})
	if err != nil {
		return nil, err
	}
	var units float64
	for _, c := range out.ConsumedCapacity {
		units += aws.ToFloat64(c.CapacityUnits)
	}
	return map[string]any{"ConsumedCapacity": []any{map[string]any{"CapacityUnits": units}}}, nil
}

// errorBody is DynamoDB's answer to err: its status and JSON body.
func errorBody(err error) (int, []byte) {
	body := map[string]any{"message": err.Error()}
	status, name := http.StatusInternalServerError, "InternalServerError"
	var tce *types.TransactionCanceledException
	var pte *types.ProvisionedThroughputExceededException
	var te *types.ThrottlingException
	var tcf *types.TransactionConflictException
	var rnf *types.ResourceNotFoundException
	switch {
	case errors.As(err, &tce):
		status, name = http.StatusBadRequest, "TransactionCanceledException"
		var reasons []map[string]any
		for _, r := range tce.CancellationReasons {
			reasons = append(reasons, map[string]any{"Code": aws.ToString(r.Code)})
		}
		body["CancellationReasons"] = reasons
	case errors.As(err, &pte):
		status, name = http.StatusBadRequest, "ProvisionedThroughputExceededException"
	case errors.As(err, &te):
		status, name = http.StatusBadRequest, "ThrottlingException"
	case errors.As(err, &tcf):
		status, name = http.StatusBadRequest, "TransactionConflictException"
	case errors.As(err, &rnf):
		status, name = http.StatusBadRequest, "ResourceNotFoundException"
	}
	body["__type"] = "com.amazonaws.dynamodb.v20120810#" + name
	b, _ := json.Marshal(body)
	return status, b
}

func remarshal(in map[string]json.RawMessage, v any) error {
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// avMap decodes an item or a key from DynamoDB's JSON ({"S": "x"}, …).
func avMap(m map[string]json.RawMessage) (map[string]types.AttributeValue, error) {
	if m == nil {
		return nil, nil
	}
	out := make(map[string]types.AttributeValue, len(m))
	for k, raw := range m {
		v, err := avDecode(raw)
		if err != nil {
			return nil, fmt.Errorf("dynamotest: attribute %s: %w", k, err)
		}
		out[k] = v
	}
	return out, nil
}

func avDecode(raw json.RawMessage) (types.AttributeValue, error) {
	var v struct {
		S, N, B *string
		BOOL    *bool
		NULL    *bool
		SS, NS  []string
		L       []json.RawMessage
		M       map[string]json.RawMessage
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, err
	}
	switch {
	case v.S != nil:
		return &types.AttributeValueMemberS{Value: *v.S}, nil
	case v.N != nil:
		return &types.AttributeValueMemberN{Value: *v.N}, nil
	case v.B != nil:
		b, err := base64.StdEncoding.DecodeString(*v.B)
		return &types.AttributeValueMemberB{Value: b}, err
	case v.BOOL != nil:
		return &types.AttributeValueMemberBOOL{Value: *v.BOOL}, nil
	case v.NULL != nil:
		return &types.AttributeValueMemberNULL{Value: true}, nil
	case v.SS != nil:
		return &types.AttributeValueMemberSS{Value: v.SS}, nil
	case v.NS != nil:
		return &types.AttributeValueMemberNS{Value: v.NS}, nil
	case v.L != nil:
		l := make([]types.AttributeValue, len(v.L))
		for i, e := range v.L {
			av, err := avDecode(e)
			if err != nil {
				return nil, err
			}
			l[i] = av
		}
		return &types.AttributeValueMemberL{Value: l}, nil
	case v.M != nil:
		m, err := avMap(v.M)
		return &types.AttributeValueMemberM{Value: m}, err
	}
	return nil, fmt.Errorf("unknown attribute value %s", raw)
}

// avMapJSON encodes an item in DynamoDB's JSON.
func avMapJSON(m map[string]types.AttributeValue) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = avJSON(v)
	}
	return out
}

func avJSON(v types.AttributeValue) any {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return map[string]any{"S": v.Value}
	case *types.AttributeValueMemberN:
		return map[string]any{"N": v.Value}
	case *types.AttributeValueMemberB:
		return map[string]any{"B": base64.StdEncoding.EncodeToString(v.Value)}
	case *types.AttributeValueMemberBOOL:
		return map[string]any{"BOOL": v.Value}
	case *types.AttributeValueMemberSS:
		return map[string]any{"SS": v.Value}
	case *types.AttributeValueMemberNS:
		return map[string]any{"NS": v.Value}
	case *types.AttributeValueMemberL:
		l := make([]any, len(v.Value))
		for i, e := range v.Value {
			l[i] = avJSON(e)
		}
		return map[string]any{"L": l}
	case *types.AttributeValueMemberM:
		return map[string]any{"M": avMapJSON(v.Value)}
	}
	return map[string]any{"NULL": true}
}

// NewFakeTable returns a Fake holding table, created by admin.CreateTable
// (its schema version written), or fails t.
func NewFakeTable(t testing.TB, table string) *Fake {
	t.Helper()
	f := NewFake()
	if err := admin.CreateTable(context.Background(), f, table); err != nil {
		t.Fatalf("dynamotest: create table %s on the fake: %v", table, err)
	}
	return f
}
