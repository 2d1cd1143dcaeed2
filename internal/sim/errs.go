package main

import (
	"errors"
	"fmt"
	"regexp"
	"sort"
	"time"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
)

// digits are what errReason drops from an error's text: keys, counts and
// durations vary from one error to the next.
var digits = regexp.MustCompile(`[0-9]+`)

// errReason names why a decision failed, for the report's errors by
// reason: a write whose answer did not come within the budget (it may
// have landed; the SDK's text after it), DynamoDB throttling through the
// budget, or the error's text.
func errReason(err error) string {
	why := digits.ReplaceAllString(err.Error(), "N")
	switch {
	case errors.Is(err, cascade.ErrMayHaveLanded):
		return "write unanswered within the budget (may have landed)"
	case errors.Is(err, dynamo.ErrThrottled):
		return "throttled through the budget"
	}
	return why
}

// failures are a run's errors of one reason: how many decisions, and how
// many calls failed them (the distinct replica and millisecond each
// failure was answered at: the decisions one batch carried fail together).
type failures struct {
	decisions int
	calls     map[[2]int64]struct{}
}

// failedFor counts one error of reason why, answered at end (since the
// start) on replica rep.
func (s *stats) failedFor(why string, rep int, end time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed == nil {
		s.failed = map[string]*failures{}
	}
	f := s.failed[why]
	if f == nil {
		f = &failures{calls: map[[2]int64]struct{}{}}
		s.failed[why] = f
	}
	f.decisions++
	f.calls[[2]int64{int64(rep), end.Milliseconds()}] = struct{}{}
}

// failedLines are the report's lines of errors by reason, most first.
// Under mu.
func (s *stats) failedLines() []string {
	var out []string
	whys := make([]string, 0, len(s.failed))
	for why := range s.failed {
		whys = append(whys, why)
	}
	sort.Slice(whys, func(i, j int) bool { return s.failed[whys[i]].decisions > s.failed[whys[j]].decisions })
	for _, why := range whys {
		f := s.failed[why]
		out = append(out, fmt.Sprintf("errors: %d decisions, answered at %d distinct (replica, millisecond): %s", f.decisions, len(f.calls), why))
	}
	return out
}
