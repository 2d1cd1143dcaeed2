package main

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/pkg/cascade"
)

// TestErrorsByReason: an unanswered write is named so whatever wraps it,
// other errors by their text without their numbers, and the decisions one
// call failed together count once as a call.
func TestErrorsByReason(t *testing.T) {
	lost := fmt.Errorf("item n/t0/api: %w: context deadline exceeded", cascade.ErrMayHaveLanded)
	if got := errReason(lost); !strings.Contains(got, "write unanswered") {
		t.Errorf("errReason(%v) = %q, want the unanswered write named", lost, got)
	}
	if got := errReason(errors.New("read of 12 keys failed")); got != "read of N keys failed" {
		t.Errorf("errReason = %q, want its text without numbers", got)
	}
	var s stats
	for range 3 {
		s.failedFor("w", 1, 40*time.Millisecond)
	}
	s.failedFor("w", 2, 40*time.Millisecond)
	s.failedFor("r", 1, time.Second)
	lines := s.failedLines()
	if len(lines) != 2 || !strings.Contains(lines[0], "4 decisions") || !strings.Contains(lines[0], "at 2 distinct") {
		t.Errorf("failedLines() = %q, want 4 decisions of w at 2 calls first", lines)
	}
}
