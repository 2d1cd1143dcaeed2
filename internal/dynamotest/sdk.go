package dynamotest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/middleware"

	"github.com/dynalimit/dynalimit/pkg/dynamo"
)

// SDKClient returns an SDK client whose calls api (a Fake, or a type that
// embeds one) answers in process. A call goes through the SDK's initialize
// step as any call does (the middleware optFns hang there included, such as
// metrics.DynamoDB and tracing.DynamoDB); at the end of that step, in place
// of serializing, signing and sending the request, api's method of the
// operation's name is called with the call's context and input. An
// operation api has no method for fails.
func SDKClient(api dynamo.API, optFns ...func(*dynamodb.Options)) *dynamodb.Client {
	answer := middleware.InitializeMiddlewareFunc("dynamotest.answer", func(ctx context.Context, in middleware.InitializeInput, _ middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
		out, err := call(ctx, api, middleware.GetOperationName(ctx), in.Parameters)
		return middleware.InitializeOutput{Result: out}, middleware.Metadata{}, err
	})
	opts := dynamodb.Options{
		Region: "us-east-1",
		APIOptions: []func(*middleware.Stack) error{func(s *middleware.Stack) error {
			return s.Initialize.Add(answer, middleware.After)
		}},
	}
	return dynamodb.New(opts, optFns...)
}

// call calls api's method op with ctx and params.
func call(ctx context.Context, api dynamo.API, op string, params any) (any, error) {
	m := reflect.ValueOf(api).MethodByName(op)
	if !m.IsValid() {
		return nil, fmt.Errorf("dynamotest: %T does not answer %s", api, op)
	}
	res := m.Call([]reflect.Value{reflect.ValueOf(ctx), reflect.ValueOf(params)})
	err, _ := res[1].Interface().(error)
	return res[0].Interface(), err
}

// Endpoint starts an HTTP server that answers DynamoDB's JSON protocol, for
// a client built by dynamo.NewClient: each request is answered with the
// status and JSON body answer returns for the request's operation (from
// its X-Amz-Target header, "DynamoDB_20120810.<Operation>"). It returns the
// server's URL; the server stops when t ends. A body for an error names it
// in __type, as DynamoDB does:
// {"__type":"com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException"}.
func Endpoint(t testing.TB, answer func(op string) (status int, body string)) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, op, _ := strings.Cut(r.Header.Get("X-Amz-Target"), ".")
		status, body := answer(op)
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}
