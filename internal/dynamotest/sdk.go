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

// Answer is what Endpoint answers a request with: an HTTP status and a
// JSON body.
type Answer struct {
	Status int
	Body   string
}

// Answers DynamoDB gives, for Endpoint.
var (
	// TTLEnabled answers DescribeTimeToLive: TTL is on, on attribute TTL.
	TTLEnabled = Answer{http.StatusOK, `{"TimeToLiveDescription":{"AttributeName":"TTL","TimeToLiveStatus":"ENABLED"}}`}
	// ConditionFailed answers a conditional write whose condition failed.
	ConditionFailed = ErrorAnswer("ConditionalCheckFailedException", "The conditional request failed")
	// Throttled answers a call over the table's provisioned throughput.
	Throttled = ErrorAnswer("ProvisionedThroughputExceededException", "slow down")
)

// ErrorAnswer is DynamoDB's answer of the error named name (its __type,
// "com.amazonaws.dynamodb.v20120810#<name>").
func ErrorAnswer(name, message string) Answer {
	return Answer{http.StatusBadRequest, fmt.Sprintf(`{"__type":"com.amazonaws.dynamodb.v20120810#%s","message":%q}`, name, message)}
}

// Endpoint starts an HTTP server that answers DynamoDB's JSON protocol, for
// a client built by dynamo.NewClient: a request for an operation in answers
// (by name, from its X-Amz-Target header "DynamoDB_20120810.<Operation>")
// gets that answer, any other gets otherwise. It returns the server's URL;
// the server stops when t ends.
func Endpoint(t testing.TB, answers map[string]Answer, otherwise Answer) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, op, _ := strings.Cut(r.Header.Get("X-Amz-Target"), ".")
		a, ok := answers[op]
		if !ok {
			a = otherwise
		}
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.WriteHeader(a.Status)
		_, _ = io.WriteString(w, a.Body)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}
