package degrade_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine running: Run's
// repayments, the DynamoDB store's work.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
