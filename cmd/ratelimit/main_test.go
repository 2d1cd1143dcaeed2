package main

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
)

// TestMain runs the tests with the shared DynamoDB Local (stopped before
// the check), then checks that no goroutine they started outlives them.
func TestMain(m *testing.M) { goleak.VerifyTestMain(withLocal{m}, idleConnections...) }

type withLocal struct{ m *testing.M }

func (w withLocal) Run() int { return dynamotest.Main(w.m) }

// idleConnections are the goroutines of an HTTP connection kept open for
// the next call: the AWS SDK's client, which has no Close, keeps those of
// the stores and commands run in this process.
var idleConnections = []goleak.Option{
	goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
	goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
}
