package config

import (
	"context"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/pkg/descriptors"
)

// within runs f and fails t if it has not returned after d: a Reloader
// whose callbacks ran under its lock would deadlock here.
func within(t *testing.T, d time.Duration, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("no return within %v: deadlocked", d)
	}
}

// TestOnReloadCallsBack: OnReload reads the Reloader's state and reloads it
// again from inside the callback; nothing deadlocks, and the nested
// reload's outcome is reported after the one under way, not inside it.
func TestOnReloadCallsBack(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), "v1")
	l := newFakeLoader()
	var (
		r      *Reloader
		got    []string
		nested error
	)
	onReload := func(ok bool, err error, _ time.Time) {
		if r == nil {
			return // the first load, made inside NewReloader
		}
		content := l.contentOf(r.Current())
		got = append(got, content)
		if !ok || r.WatchProblem() != "" {
			t.Errorf("OnReload(%v, %v) with watch problem %q, want ok and none", ok, err, r.WatchProblem())
		}
		if content == "v1" {
			writeFile(t, filepath.Join(dir, "a.yaml"), "v2")
			nested = r.Reload()
			got = append(got, "nested reload returned")
		}
	}
	r0, err := NewReloader(ReloaderOptions{Dir: dir, Load: l.load, Logger: nullLogger(), OnReload: onReload})
	if err != nil {
		t.Fatal(err)
	}
	r = r0
	within(t, 10*time.Second, func() {
		if err := r.Reload(); err != nil {
			t.Errorf("Reload() = %v", err)
		}
	})
	if nested != nil {
		t.Errorf("Reload() inside OnReload = %v", nested)
	}
	want := []string{"v1", "nested reload returned", "v2"}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("OnReload saw %q, want %q", got, want)
	}
}

// TestOnReloadCallsBackWhileRunning: while Run reloads, OnReload triggers
// and makes reloads of its own, and other goroutines reload at the same
// time; nothing deadlocks, OnReload is never called twice at once, and the
// last content written is live at the end.
func TestOnReloadCallsBackWhileRunning(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), "v0")
	l := newFakeLoader()
	var (
		ready    atomic.Pointer[Reloader]
		inside   atomic.Int32
		reports  atomic.Int32
		overlaps atomic.Int32
	)
	onReload := func(bool, error, time.Time) {
		if inside.Add(1) > 1 {
			overlaps.Add(1)
		}
		defer inside.Add(-1)
		r := ready.Load()
		if r == nil {
			return
		}
		if reports.Add(1) <= 5 {
			r.Trigger()
			_ = r.Reload()
		}
		_, _ = r.Current(), r.WatchProblem()
	}
	r, err := NewReloader(ReloaderOptions{Dir: dir, Load: l.load, Logger: nullLogger(), OnReload: onReload, Debounce: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ready.Store(r)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run() = %v", err)
		}
	}()
	within(t, 20*time.Second, func() {
		r.Trigger()
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for range 5 {
					_ = r.Reload()
				}
			})
		}
		wg.Wait()
		writeFile(t, filepath.Join(dir, "a.yaml"), "v1")
		if err := r.Reload(); err != nil {
			t.Errorf("Reload() = %v", err)
		}
	})
	if got := l.contentOf(r.Current()); got != "v1" {
		t.Errorf("Current() content = %q, want v1", got)
	}
	if n := overlaps.Load(); n != 0 {
		t.Errorf("OnReload ran %d times while another call of it was running, want never", n)
	}
	// A load that a later one overtakes is not reported (TestOvertakenLoadNotLive),
	// so the 21 reloads and the callbacks' own may report as few as one: the
	// last to start. (A clean clone's run counted 4.)
	if reports.Load() < 1 {
		t.Errorf("%d reports, want at least the last reload's", reports.Load())
	}
}

// TestOvertakenLoadNotLive: of two loads that overlap, the one that started
// last decides, even when the first ends after it: the first's older
// configuration is never made live, nor reported.
func TestOvertakenLoadNotLive(t *testing.T) {
	dir := t.TempDir()
	old, newer := &descriptors.Config{}, &descriptors.Config{}
	release := make(chan struct{})
	var calls atomic.Int32
	load := func(string) (*descriptors.Config, error) {
		switch calls.Add(1) {
		case 1:
			return old, nil // NewReloader's
		case 2:
			<-release // the overtaken load
			return old, nil
		}
		return newer, nil
	}
	var reported atomic.Int32
	r, err := NewReloader(ReloaderOptions{Dir: dir, Load: load, Logger: nullLogger(), OnReload: func(bool, error, time.Time) { reported.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan error, 1)
	go func() { first <- r.Reload() }()
	for calls.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	if err := r.Reload(); err != nil || r.Current() != newer {
		t.Fatalf("second Reload() = %v, live %p, want nil and the newer %p", err, r.Current(), newer)
	}
	close(release)
	if err := <-first; err != nil {
		t.Errorf("overtaken Reload() = %v, want nil", err)
	}
	if r.Current() != newer {
		t.Errorf("Current() after the overtaken load ended = %p, want the newer %p", r.Current(), newer)
	}
	if n := reported.Load(); n != 2 {
		t.Errorf("OnReload calls = %d, want 2 (NewReloader's and the newer load's)", n)
	}
}
