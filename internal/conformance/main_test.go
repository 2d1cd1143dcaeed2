package conformance

import (
	"os"
	"testing"

	"google.golang.org/grpc/grpclog"
)

func TestMain(m *testing.M) {
	// Before any gRPC call: grpclog's logger is not safe to swap later.
	grpclog.SetLoggerV2(fatal)
	os.Exit(m.Run())
}
