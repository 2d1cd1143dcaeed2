package envoytest

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"testing"
)

var (
	scenMu sync.Mutex
	scens  = map[string]string{} // scenario → outcome
)

// Scenario records that t runs the named scenario; its outcome (passed,
// failed or skipped) is taken at t's cleanup and counted by Report.
func Scenario(t testing.TB, name string) {
	t.Helper()
	t.Logf("scenario %s", name)
	t.Cleanup(func() {
		outcome := "passed"
		switch {
		case t.Skipped():
			outcome = "skipped"
		case t.Failed():
			outcome = "failed"
		}
		scenMu.Lock()
		scens[name] = outcome
		scenMu.Unlock()
	})
}

// Report writes how many scenarios ran and how each ended, one line each,
// and returns how many ran and how many of those did not pass.
func Report(w io.Writer, pkg string) (ran, notPassed int) {
	scenMu.Lock()
	defer scenMu.Unlock()
	names := make([]string, 0, len(scens))
	count := map[string]int{}
	for n, o := range scens {
		names = append(names, n)
		count[o]++
	}
	sort.Strings(names)
	fmt.Fprintf(w, "%s: %d scenarios ran through Envoy %s: %d passed, %d failed, %d skipped\n",
		pkg, len(names), Version, count["passed"], count["failed"], count["skipped"])
	for _, n := range names {
		fmt.Fprintf(w, "  %-7s %s\n", strings.ToUpper(scens[n]), n)
	}
	return len(names), count["failed"] + count["skipped"]
}
