package grpcserver

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain runs the attack tests' child server when asked to, and
// otherwise the tests, then checks that none left a goroutine behind: every
// connection's reader and every call's goroutine has an owner that waits
// for it.
func TestMain(m *testing.M) {
	if kind := os.Getenv(attackChildEnv); kind != "" {
		runAttackChild(kind)
	}
	goleak.VerifyTestMain(m)
}
