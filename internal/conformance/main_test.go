package conformance

import (
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/grpc/grpclog"
)

func TestMain(m *testing.M) {
	// Before any gRPC call: grpclog's logger is not safe to swap later.
	grpclog.SetLoggerV2(fatal)
	goleak.VerifyTestMain(m)
}
