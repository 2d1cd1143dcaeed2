package config

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
	"go.uber.org/goleak"

	"github.com/dynalimit/dynalimit/pkg/descriptors"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fakeLoader reads every regular file (symlinks followed) directly in dir,
// skipping dot names, and concatenates them in name order. Content with a
// line starting "bad" fails with a descriptors.Error naming each such line.
// It remembers which content each returned config came from.
type fakeLoader struct {
	mu      sync.Mutex
	content map[*descriptors.Config]string
	calls   int
}

func newFakeLoader() *fakeLoader {
	return &fakeLoader{content: map[*descriptors.Config]string{}}
}

func (l *fakeLoader) load(dir string) (*descriptors.Config, error) {
	l.mu.Lock()
	l.calls++
	l.mu.Unlock()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), ".") {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	var b strings.Builder
	var problems []descriptors.Problem
	for _, n := range names {
		p := filepath.Join(dir, n)
		fi, err := os.Stat(p)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		for i, line := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(line, "bad") {
				problems = append(problems, descriptors.Problem{File: p, Line: i + 1, Key: "unit", Msg: "unknown unit " + line})
			}
		}
		b.Write(data)
	}
	if len(problems) > 0 {
		return nil, &descriptors.Error{Problems: problems}
	}
	cfg := &descriptors.Config{}
	l.mu.Lock()
	l.content[cfg] = b.String()
	l.mu.Unlock()
	return cfg, nil
}

func (l *fakeLoader) contentOf(c *descriptors.Config) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.content[c]
}

func (l *fakeLoader) callCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.calls
}

type reloadEvent struct {
	ok  bool
	err error
}

// harness runs a Reloader over real directories.
type harness struct {
	t      *testing.T
	r      *Reloader
	loader *fakeLoader
	events chan reloadEvent
	hook   *logtest.Hook
	done   chan error
	cancel context.CancelFunc
}

func startReloader(t *testing.T, dir, watchDir string) *harness {
	t.Helper()
	return startReloaderDebounce(t, dir, watchDir, 50*time.Millisecond)
}

func startReloaderDebounce(t *testing.T, dir, watchDir string, debounce time.Duration) *harness {
	t.Helper()
	h := &harness{t: t, loader: newFakeLoader(), events: make(chan reloadEvent, 64)}
	logger, hook := logtest.NewNullLogger()
	h.hook = hook
	r, err := NewReloader(ReloaderOptions{
		Dir:      dir,
		WatchDir: watchDir,
		Load:     h.loader.load,
		Debounce: debounce,
		Logger:   logrus.NewEntry(logger),
		OnReload: func(ok bool, err error, _ time.Time) { h.events <- reloadEvent{ok, err} },
	})
	if err != nil {
		t.Fatalf("NewReloader(%s) error = %v", dir, err)
	}
	h.r = r
	if ev := h.next(); !ev.ok {
		t.Fatalf("first OnReload = %+v, want ok", ev)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	h.done = make(chan error, 1)
	ready := make(chan struct{})
	go func() {
		close(ready)
		h.done <- r.Run(ctx)
	}()
	<-ready
	// Let Run add its watches before the test starts changing files: a
	// Trigger is served only by the loop, after the watches are in place.
	r.Trigger()
	if ev := h.next(); !ev.ok {
		t.Fatalf("OnReload after start trigger = %+v, want ok", ev)
	}
	t.Cleanup(h.stop)
	return h
}

func (h *harness) stop() {
	if h.cancel == nil {
		return
	}
	h.cancel()
	h.cancel = nil
	select {
	case err := <-h.done:
		if err != nil {
			h.t.Errorf("Run() = %v, want nil after cancel", err)
		}
	case <-time.After(5 * time.Second):
		h.t.Errorf("Run() did not return after cancel")
	}
}

func (h *harness) next() reloadEvent {
	h.t.Helper()
	select {
	case ev := <-h.events:
		return ev
	case <-time.After(5 * time.Second):
		h.t.Fatalf("no reload within 5s")
		return reloadEvent{}
	}
}

// waitContent waits for reloads until the live config has content want.
func (h *harness) waitContent(want string) {
	h.t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		if got := h.loader.contentOf(h.r.Current()); got == want {
			return
		}
		select {
		case <-h.events:
		case <-deadline:
			h.t.Fatalf("Current() content = %q, want %q within 5s", h.loader.contentOf(h.r.Current()), want)
		}
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestReloadOnWrite(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "config")
	writeFile(t, filepath.Join(dir, "a.yaml"), "v1")
	h := startReloader(t, dir, root)
	if got := h.loader.contentOf(h.r.Current()); got != "v1" {
		t.Fatalf("Current() content = %q, want v1", got)
	}
	writeFile(t, filepath.Join(dir, "a.yaml"), "v2")
	h.waitContent("v2")
	writeFile(t, filepath.Join(dir, "b.yaml"), "+b")
	h.waitContent("v2+b")
	if err := os.Remove(filepath.Join(dir, "a.yaml")); err != nil {
		t.Fatal(err)
	}
	h.waitContent("+b")
}

func TestReloadOnRenameOver(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), "v1")
	h := startReloader(t, dir, "")
	tmp := filepath.Join(dir, ".a.yaml.tmp")
	writeFile(t, tmp, "v2")
	if err := os.Rename(tmp, filepath.Join(dir, "a.yaml")); err != nil {
		t.Fatal(err)
	}
	h.waitContent("v2")
}

func TestReloadWatchesNewSubdirectories(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "config")
	writeFile(t, filepath.Join(dir, "a.yaml"), "v1")
	h := startReloader(t, dir, root)
	before := h.loader.callCount()
	if err := os.MkdirAll(filepath.Join(root, "other", "deep"), 0o755); err != nil {
		t.Fatal(err)
	}
	h.next() // the mkdir burst; the reload re-syncs the watches first
	writeFile(t, filepath.Join(root, "other", "deep", "x"), "x")
	h.next()
	if got := h.loader.callCount(); got < before+2 {
		t.Errorf("loads after mkdir and write = %d, want ≥ %d", got, before+2)
	}
}

// kubeWrite updates dir as the kubelet's atomic writer does a ConfigMap: a
// new timestamped directory, a ..data_tmp link to it renamed over ..data,
// top-level links into ..data, and the old directory removed.
func kubeWrite(t *testing.T, dir, version string, files map[string]string) {
	t.Helper()
	ts := "..2026_" + version
	for name, content := range files {
		writeFile(t, filepath.Join(dir, ts, name), content)
	}
	old, _ := os.Readlink(filepath.Join(dir, "..data"))
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for name := range files {
		link := filepath.Join(dir, name)
		if _, err := os.Lstat(link); err != nil {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				t.Fatal(err)
			}
		}
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(dir, old)); err != nil {
			t.Fatal(err)
		}
	}
}

func TestReloadOnConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	kubeWrite(t, dir, "01", map[string]string{"config.yaml": "v1"})
	h := startReloader(t, dir, "")
	if got := h.loader.contentOf(h.r.Current()); got != "v1" {
		t.Fatalf("Current() content = %q, want v1", got)
	}
	kubeWrite(t, dir, "02", map[string]string{"config.yaml": "v2"})
	h.waitContent("v2")
	// A second swap is seen too: the watches follow the swaps.
	kubeWrite(t, dir, "03", map[string]string{"config.yaml": "v3"})
	h.waitContent("v3")
}

func TestReloadOnRootSymlinkSwap(t *testing.T) {
	base := t.TempDir()
	writeFile(t, filepath.Join(base, "v1", "config", "a.yaml"), "v1")
	writeFile(t, filepath.Join(base, "v2", "config", "a.yaml"), "v2")
	root := filepath.Join(base, "current")
	if err := os.Symlink("v1", root); err != nil {
		t.Fatal(err)
	}
	h := startReloader(t, filepath.Join(root, "config"), root)
	tmp := filepath.Join(base, "current.tmp")
	if err := os.Symlink("v2", tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, root); err != nil {
		t.Fatal(err)
	}
	h.waitContent("v2")
	// After the swap, edits inside the new tree are watched.
	writeFile(t, filepath.Join(base, "v2", "config", "a.yaml"), "v2b")
	h.waitContent("v2b")
	// Unrelated names beside the root do not reload.
	before := h.loader.callCount()
	writeFile(t, filepath.Join(base, "unrelated"), "x")
	select {
	case ev := <-h.events:
		t.Errorf("OnReload(%+v) after a write beside the root, want none", ev)
	case <-time.After(300 * time.Millisecond):
	}
	if got := h.loader.callCount(); got != before {
		t.Errorf("loads after unrelated write = %d, want %d", got, before)
	}
}

func TestReloadBadThenGood(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), "v1")
	h := startReloader(t, dir, "")
	good := h.r.Current()
	h.hook.Reset()

	writeFile(t, filepath.Join(dir, "a.yaml"), "bad one\nok\nbad two")
	ev := h.next()
	var derr *descriptors.Error
	if ev.ok || !errors.As(ev.err, &derr) || len(derr.Problems) != 2 {
		t.Fatalf("OnReload after bad write = %+v, want failure with 2 problems", ev)
	}
	if h.r.Current() != good {
		t.Errorf("Current() changed after a bad reload, want the old config kept")
	}
	var errorsLogged []*logrus.Entry
	for _, e := range h.hook.AllEntries() {
		if e.Level == logrus.ErrorLevel {
			errorsLogged = append(errorsLogged, e)
		}
	}
	if len(errorsLogged) != 1 {
		t.Fatalf("error log entries = %d, want exactly 1", len(errorsLogged))
	}
	problems, _ := errorsLogged[0].Data["problems"].([]string)
	if len(problems) != 2 || !strings.Contains(problems[0], "a.yaml:1: unit:") || !strings.Contains(problems[1], "a.yaml:3: unit:") {
		t.Errorf("logged problems = %q, want both, with file, line and key", problems)
	}

	writeFile(t, filepath.Join(dir, "a.yaml"), "v2")
	h.waitContent("v2")
}

func TestReloadTrigger(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), "v1")
	h := startReloader(t, dir, "")
	before := h.loader.callCount()
	h.r.Trigger()
	if ev := h.next(); !ev.ok {
		t.Errorf("OnReload after Trigger = %+v, want ok", ev)
	}
	if got := h.loader.callCount(); got != before+1 {
		t.Errorf("loads after Trigger = %d, want %d", got, before+1)
	}
}

func TestRunTwiceIsError(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), "v1")
	h := startReloader(t, dir, "")
	if err := h.r.Run(context.Background()); err == nil {
		t.Errorf("second concurrent Run() = nil, want an error")
	}
}

// nullLogger is a logger that writes nowhere.
func nullLogger() *logrus.Entry {
	l, _ := logtest.NewNullLogger()
	return logrus.NewEntry(l)
}

// TestReloadDirRemovedAndRecreated: the watched directory is removed, the
// watch is lost and says so (WatchProblem, a failed reload), and once the
// directory is back with a changed file the change is applied within 2 s,
// at the default debounce.
func TestReloadDirRemovedAndRecreated(t *testing.T) {
	for _, gap := range []time.Duration{0, 1500 * time.Millisecond} {
		t.Run(fmt.Sprintf("recreated after %v", gap), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "config")
			writeFile(t, filepath.Join(dir, "a.yaml"), "v1")
			h := startReloaderDebounce(t, dir, dir, DefaultDebounce)
			if p := h.r.WatchProblem(); p != "" {
				t.Fatalf("WatchProblem() = %q before the removal, want none", p)
			}
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
			if gap > 0 {
				// The reload after the removal fails, and the lost watch is
				// reported.
				deadline := time.Now().Add(5 * time.Second)
				for h.r.WatchProblem() == "" && time.Now().Before(deadline) {
					time.Sleep(10 * time.Millisecond)
				}
				if p := h.r.WatchProblem(); !strings.Contains(p, "watch lost") {
					t.Fatalf("WatchProblem() with the directory gone = %q, want it lost", p)
				}
				time.Sleep(gap)
			}
			recreated := time.Now()
			writeFile(t, filepath.Join(dir, "a.yaml"), "v2")
			h.waitContent("v2")
			if took := time.Since(recreated); took > 2*time.Second {
				t.Errorf("change applied %v after the directory came back, want within 2s", took)
			}
			// Watched again: a later write is seen without polling.
			deadline := time.Now().Add(5 * time.Second)
			for h.r.WatchProblem() != "" && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if p := h.r.WatchProblem(); p != "" {
				t.Fatalf("WatchProblem() after the directory came back = %q, want none", p)
			}
			writeFile(t, filepath.Join(dir, "a.yaml"), "v3")
			h.waitContent("v3")
		})
	}
}

func TestNewReloaderErrors(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), "bad")
	l := newFakeLoader()
	var reported []reloadEvent
	tests := []struct {
		name string
		o    ReloaderOptions
		want string
	}{
		{"no dir", ReloaderOptions{Load: l.load}, "Dir is empty"},
		{"no load", ReloaderOptions{Dir: dir}, "Load is nil"},
		{"dir outside watch dir", ReloaderOptions{Dir: dir, WatchDir: filepath.Join(dir, "sub"), Load: l.load}, "not under WatchDir"},
		{"negative debounce", ReloaderOptions{Dir: dir, Load: l.load, Debounce: -1}, "negative"},
		{"bad first load", ReloaderOptions{Dir: dir, Load: l.load, OnReload: func(ok bool, err error, _ time.Time) {
			reported = append(reported, reloadEvent{ok, err})
		}}, "unknown unit"},
		{"nil config", ReloaderOptions{Dir: dir, Load: func(string) (*descriptors.Config, error) { return nil, nil }}, "no configuration"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := NewReloader(tt.o)
			if r != nil || err == nil || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "config: ") {
				t.Errorf("NewReloader() = %v, %v, want nil and an error containing %q", r, err, tt.want)
			}
		})
	}
	if len(reported) != 1 || reported[0].ok {
		t.Errorf("OnReload on a bad first load = %+v, want one failure", reported)
	}
}

func TestReloadManual(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), "v1")
	l := newFakeLoader()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var gotAt []time.Time
	r, err := NewReloader(ReloaderOptions{Dir: dir, Load: l.load, Logger: nullLogger(), Now: func() time.Time { return at },
		OnReload: func(_ bool, _ error, t time.Time) { gotAt = append(gotAt, t) }})
	if err != nil {
		t.Fatal(err)
	}
	first := r.Current()
	writeFile(t, filepath.Join(dir, "a.yaml"), "bad")
	if err := r.Reload(); err == nil {
		t.Errorf("Reload() of bad files = nil, want an error")
	}
	if r.Current() != first {
		t.Errorf("Current() changed after a failed Reload")
	}
	writeFile(t, filepath.Join(dir, "a.yaml"), "v2")
	if err := r.Reload(); err != nil {
		t.Errorf("Reload() = %v, want nil", err)
	}
	if got := l.contentOf(r.Current()); got != "v2" {
		t.Errorf("Current() content = %q, want v2", got)
	}
	if len(gotAt) != 3 || !gotAt[2].Equal(at) {
		t.Errorf("OnReload times = %v, want 3 calls at %v", gotAt, at)
	}
}

func TestFSSourceRelevant(t *testing.T) {
	s := &fsSource{root: "/srv/current", anchor: "/srv"}
	tests := []struct {
		name string
		ev   fsnotify.Event
		want bool
	}{
		{"write", fsnotify.Event{Name: "/srv/current/config/a.yaml", Op: fsnotify.Write}, true},
		{"create", fsnotify.Event{Name: "/srv/current/config/b.yaml", Op: fsnotify.Create}, true},
		{"chmod only", fsnotify.Event{Name: "/srv/current/config/a.yaml", Op: fsnotify.Chmod}, false},
		{"chmod and write", fsnotify.Event{Name: "/srv/current/config/a.yaml", Op: fsnotify.Chmod | fsnotify.Write}, true},
		{"root link swapped", fsnotify.Event{Name: "/srv/current", Op: fsnotify.Create}, true},
		{"beside the root", fsnotify.Event{Name: "/srv/other", Op: fsnotify.Create}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := s.relevant(tt.ev); got != tt.want {
				t.Errorf("relevant(%v) = %v, want %v", tt.ev, got, tt.want)
			}
		})
	}
	// Root and its parent gone: the anchor is their nearest ancestor.
	deep := &fsSource{root: "/srv/current/config", anchor: "/srv"}
	if !deep.relevant(fsnotify.Event{Name: "/srv/current", Op: fsnotify.Create}) {
		t.Errorf("relevant(root's parent recreated) = false, want true")
	}
	if deep.relevant(fsnotify.Event{Name: "/srv/cur", Op: fsnotify.Create}) {
		t.Errorf("relevant(a name that prefixes root's parent) = true, want false")
	}
}

func ExampleReloader() {
	dir, err := os.MkdirTemp("", "descriptors")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	loads := 0
	r, err := NewReloader(ReloaderOptions{
		Dir: dir,
		Load: func(string) (*descriptors.Config, error) {
			loads++
			return &descriptors.Config{}, nil
		},
		Logger: logrus.NewEntry(&logrus.Logger{Out: io.Discard, Formatter: new(logrus.JSONFormatter), Hooks: logrus.LevelHooks{}, Level: logrus.InfoLevel}),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(r.Current() != nil, loads)
	// Run(ctx) would watch dir; Reload loads synchronously.
	err = r.Reload()
	fmt.Println(err, loads)
	// Output:
	// true 1
	// <nil> 2
}

func BenchmarkCurrent(b *testing.B) {
	b.ReportAllocs()
	r, err := NewReloader(ReloaderOptions{Dir: "/unused", Logger: nullLogger(),
		Load: func(string) (*descriptors.Config, error) { return &descriptors.Config{}, nil }})
	if err != nil {
		b.Fatal(err)
	}
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if r.Current() == nil {
				b.Fatal("Current() = nil")
			}
		}
	})
}
