package config

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
)

const goodYAML = `domain: %s
descriptors:
  - key: generic_key
    value: default
    rate_limit:
      unit: second
      requests_per_unit: 5
`

// TestReloadRealDescriptors runs the Reloader with Settings.Loader over a
// real descriptor directory laid out as RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/
// config: a good file, a file with an unknown key (kept out), then fixed.
func TestReloadRealDescriptors(t *testing.T) {
	root := t.TempDir()
	s := Defaults()
	s.RuntimeRoot, s.RuntimeSubdirectory = root, "ratelimit"
	writeFile(t, filepath.Join(s.ConfigDir(), "a.yaml"), strings.ReplaceAll(goodYAML, "%s", "alpha"))

	logger, hook := logtest.NewNullLogger()
	results := make(chan bool, 16)
	r, err := NewReloader(ReloaderOptions{
		Dir:      s.ConfigDir(),
		WatchDir: s.WatchDir(),
		Load:     s.Loader(),
		Debounce: 20 * time.Millisecond,
		Logger:   logrus.NewEntry(logger),
		OnReload: func(ok bool, _ error, _ time.Time) { results <- ok },
	})
	if err != nil {
		t.Fatalf("NewReloader() error = %v", err)
	}
	<-results
	if !r.Current().HasDomain("alpha") {
		t.Fatalf("Current().HasDomain(alpha) = false, want true")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run() = %v, want nil", err)
		}
	}()
	r.Trigger()
	<-results

	wait := func() bool {
		t.Helper()
		select {
		case ok := <-results:
			return ok
		case <-time.After(5 * time.Second):
			t.Fatalf("no reload within 5s")
			return false
		}
	}
	hook.Reset()
	writeFile(t, filepath.Join(s.ConfigDir(), "b.yaml"), "domain: beta\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, bogus: 2}\n")
	if wait() {
		t.Fatalf("OnReload after an unknown key = ok, want failure")
	}
	if r.Current().HasDomain("beta") || !r.Current().HasDomain("alpha") {
		t.Errorf("Current() after a bad reload changed, want the old config (alpha only)")
	}
	var logged *logrus.Entry
	for _, e := range hook.AllEntries() {
		if e.Level == logrus.ErrorLevel {
			logged = e
		}
	}
	if logged == nil {
		t.Fatalf("no error logged for the bad reload")
	}
	problems, _ := logged.Data["problems"].([]string)
	if len(problems) == 0 || !strings.Contains(problems[0], "b.yaml:4") || !strings.Contains(problems[0], "bogus") {
		t.Errorf("logged problems = %q, want b.yaml, its line 4 and the key bogus", problems)
	}

	writeFile(t, filepath.Join(s.ConfigDir(), "b.yaml"), strings.ReplaceAll(goodYAML, "%s", "beta"))
	for !wait() {
	}
	if !r.Current().HasDomain("beta") {
		t.Errorf("Current().HasDomain(beta) = false after the fix, want true")
	}
}
