package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"
)

// The page's tests drive Debian's headless Chromium by its command line
// (--dump-dom, --screenshot): the DOM after the browser parsed the page,
// and a picture of it at a given size. The page runs no script, so
// nothing needs the DevTools protocol.

// chromium is the path of Chromium; a test that needs it fails, never
// skips, when it is missing.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("headless Chromium is missing: install Debian's chromium package (apt-get install chromium; .ci/run installs it when missing)")
	return ""
}

// browse runs headless Chromium on url with args (--dump-dom, or
// --screenshot=FILE) and returns what it printed on stdout.
func browse(t *testing.T, url string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	all := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
		"--user-data-dir=" + t.TempDir(), "--virtual-time-budget=2000"}, args...)
	cmd := exec.CommandContext(ctx, chromium(t), append(all, url)...)
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	out, err := cmd.Output()
	if err != nil {
		stderr := ""
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("chromium %v %s: %v\n%s", args, url, err, stderr)
	}
	return string(out)
}

// dom is the page at url as Chromium parsed it.
func dom(t *testing.T, url string) string {
	t.Helper()
	return browse(t, url, "--dump-dom")
}

// screenshot saves a PNG of the page at url at width×height under dir and
// returns its path.
func screenshot(t *testing.T, url, dir, name, size string) string {
	t.Helper()
	path := dir + "/" + name + ".png"
	browse(t, url, "--screenshot="+path, "--window-size="+size, "--hide-scrollbars")
	st, err := os.Stat(path)
	if err != nil || st.Size() < 1000 {
		t.Fatalf("screenshot %s at %s: %v (%v)", url, size, err, st)
	}
	return path
}
