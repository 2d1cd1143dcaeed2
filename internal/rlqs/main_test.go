package rlqs

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind: every stream's
// handler ends with its server.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
