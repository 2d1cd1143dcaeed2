package benchenv

import (
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/internal/testutil"
)

// Or returns the environment variable k, or def when it is empty.
func Or(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// Duration reads the environment variable k as a non-negative duration
// (def when empty); anything else fails t.
func Duration(t testing.TB, k string, def time.Duration) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(Or(k, def.String()))
	if err != nil || d < 0 {
		t.Fatalf("%s: %q is not a duration (%v)", k, os.Getenv(k), err)
	}
	return d
}

// Ints reads the environment variable k as positive numbers separated by
// commas (def when empty); anything else fails t.
func Ints(t testing.TB, k, def string) []int {
	t.Helper()
	var out []int
	for _, s := range strings.Split(Or(k, def), ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			t.Fatalf("%s: %q is not a positive number", k, s)
		}
		out = append(out, n)
	}
	return out
}

// CPUTicks returns utime+stime of pid in clock ticks (testutil.ProcessCPU);
// a process it cannot read fails t.
func CPUTicks(t testing.TB, pid int) int64 {
	t.Helper()
	cpu := testutil.ProcessCPU(pid)
	if cpu < 0 {
		t.Fatalf("cpu of %d: cannot read /proc/%d/stat", pid, pid)
	}
	return int64(cpu / (10 * time.Millisecond)) // USER_HZ: 100 ticks a second
}

// DynamoDBLocalPid finds the DynamoDB Local process (the JVM that
// internal/dynamotest started) serving endpoint; false when there is none.
func DynamoDBLocalPid(t testing.TB, endpoint string) (int, bool) {
	t.Helper()
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if i := slices.Index(args, "-port"); i >= 0 && i+1 < len(args) && args[i+1] == u.Port() && slices.Contains(args, "-jar") {
			pid, _ := strconv.Atoi(filepath.Base(d))
			return pid, true
		}
	}
	return 0, false
}

// LoadAvg returns the 1, 5 and 15 minute load averages, or "unknown".
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}
