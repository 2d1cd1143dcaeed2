package service

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/dynalimit/dynalimit/internal/memstore"
	"github.com/dynalimit/dynalimit/pkg/descriptors"
)

// TestExpiredDeadlineIsNoAdmission: on the native transport a call's
// deadline reaches the store without a timer (the context starts one only
// when asked); a call whose deadline has passed is answered
// DeadlineExceeded, never admitted by ON_UNAVAILABLE=allow as if the store
// had failed.
func TestExpiredDeadlineIsNoAdmission(t *testing.T) {
	cfg := mustConfig(t, testConfig)
	svc := New(memstore.New(), func() *descriptors.Config { return cfg }, WithOnUnavailable(false))
	cl := wireClient(t, svc, nil).WithTimeout("1n")
	req, err := proto.Marshal(rlReq("api", desc("user", "alice")))
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		out, st, err := cl.Call(shouldRateLimit, req)
		if err != nil {
			t.Fatal(err)
		}
		if st != "4" {
			t.Fatalf("grpc-status %q (answer %d bytes), want 4 (DeadlineExceeded): an expired call must not be decided", st, len(out))
		}
	}
}
