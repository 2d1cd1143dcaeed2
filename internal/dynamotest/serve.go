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
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/admin"
)

// Serve starts an HTTP server speaking DynamoDB's JSON protocol in front of
// api (a Fake, or a type embedding one), for a process that talks to
// DynamoDB itself (a client built by dynamo.NewClient on the server's URL,
// or the binary with DYNAMODB_ENDPOINT set to it): every operation of
// dynamo.API is answered by api, its request decoded into the SDK's input
// and its output encoded back by their fields (wire.go). An error of api
// is answered as DynamoDB would answer it (a failed condition or a
// cancelled transaction with its reasons, throttling, a missing table),
// anything else as a server error. It returns the server's URL; the server
// stops when t ends.
func Serve(t testing.TB, api dynamo.API) string {
	t.Helper()
	ops := operations(api)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, name, _ := strings.Cut(r.Header.Get("X-Amz-Target"), ".")
		body, err := io.ReadAll(r.Body)
		var out any
		if err == nil {
			op, ok := ops[name]
			if !ok {
				err = &types.InternalServerError{Message: aws.String("dynamotest: Serve does not answer " + name)}
			} else {
				out, err = op(r.Context(), body)
			}
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

// errorBody is DynamoDB's answer to err: its status and JSON body.
func errorBody(err error) (int, []byte) {
	body := map[string]any{"message": err.Error()}
	status, name := http.StatusInternalServerError, "InternalServerError"
	var tce *types.TransactionCanceledException
	var ccf *types.ConditionalCheckFailedException
	var pte *types.ProvisionedThroughputExceededException
	var te *types.ThrottlingException
	var tcf *types.TransactionConflictException
	var rnf *types.ResourceNotFoundException
	switch {
	case errors.As(err, &tce):
		status, name = http.StatusBadRequest, "TransactionCanceledException"
		var reasons []map[string]any
		for _, r := range tce.CancellationReasons {
			reason := map[string]any{"Code": aws.ToString(r.Code)}
			if r.Item != nil {
				reason["Item"] = avMapJSON(r.Item)
			}
			reasons = append(reasons, reason)
		}
		body["CancellationReasons"] = reasons
	case errors.As(err, &ccf):
		status, name = http.StatusBadRequest, "ConditionalCheckFailedException"
		if ccf.Item != nil {
			body["Item"] = avMapJSON(ccf.Item)
		}
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
