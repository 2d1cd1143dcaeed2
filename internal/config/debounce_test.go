package config

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/dynalimit/dynalimit/pkg/descriptors"
)

// fakeSource feeds the loop hand-made events; every event is relevant
// unless its Op is Chmod alone.
type fakeSource struct {
	ev      chan fsnotify.Event
	errs    chan error
	mu      sync.Mutex
	syncs   int
	syncErr error  // what sync returns
	tree    string // what summary returns
}

func newFakeSource() *fakeSource {
	return &fakeSource{ev: make(chan fsnotify.Event), errs: make(chan error)}
}

func (s *fakeSource) events() <-chan fsnotify.Event { return s.ev }
func (s *fakeSource) errors() <-chan error          { return s.errs }
func (s *fakeSource) relevant(ev fsnotify.Event) bool {
	return ev.Op != fsnotify.Chmod
}
func (s *fakeSource) sync() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.syncs++
	return s.syncErr
}

func (s *fakeSource) summary() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tree
}

// set changes what sync and summary return.
func (s *fakeSource) set(syncErr error, tree string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.syncErr, s.tree = syncErr, tree
}

// loopRig runs Reloader.loop over a fakeSource inside a synctest bubble and
// records the fake-clock instant of every load after the first.
type loopRig struct {
	t      *testing.T
	r      *Reloader
	src    *fakeSource
	start  time.Time
	mu     sync.Mutex
	loads  []time.Duration // since start
	cancel context.CancelFunc
	done   chan error
}

func newLoopRig(t *testing.T, debounce time.Duration) *loopRig {
	g := &loopRig{t: t, src: newFakeSource(), start: time.Now(), done: make(chan error, 1)}
	first := true
	r, err := NewReloader(ReloaderOptions{
		Dir:      "/unused",
		Debounce: debounce,
		Logger:   nullLogger(),
		Load: func(string) (*descriptors.Config, error) {
			if !first {
				g.mu.Lock()
				g.loads = append(g.loads, time.Since(g.start))
				g.mu.Unlock()
			}
			first = false
			return &descriptors.Config{}, nil
		},
	})
	if err != nil {
		t.Fatalf("NewReloader() error = %v", err)
	}
	g.r = r
	return g
}

func (g *loopRig) run() {
	ctx, cancel := context.WithCancel(context.Background())
	g.cancel = cancel
	go func() { g.done <- g.r.loop(ctx, g.src) }()
}

func (g *loopRig) stop() {
	g.cancel()
	if err := <-g.done; err != nil {
		g.t.Errorf("loop() = %v, want nil after cancel", err)
	}
}

func (g *loopRig) event(op fsnotify.Op) { g.src.ev <- fsnotify.Event{Name: "/unused/a.yaml", Op: op} }

func (g *loopRig) loadTimes() []time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]time.Duration(nil), g.loads...)
}

func equalDurations(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestDebounceBurst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newLoopRig(t, time.Second)
		g.run()
		// Five writes 100ms apart: one reload, 1s after the last.
		for i := range 5 {
			if i > 0 {
				time.Sleep(100 * time.Millisecond)
			}
			g.event(fsnotify.Write)
		}
		time.Sleep(999 * time.Millisecond)
		synctest.Wait()
		if got := g.loadTimes(); len(got) != 0 {
			t.Fatalf("loads before the quiet second = %v, want none", got)
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if got, want := g.loadTimes(), []time.Duration{1400 * time.Millisecond}; !equalDurations(got, want) {
			t.Errorf("load times = %v, want %v", got, want)
		}
		g.stop()
	})
}

func TestDebounceSeparateBursts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newLoopRig(t, time.Second)
		g.run()
		g.event(fsnotify.Create)
		time.Sleep(3 * time.Second)
		g.event(fsnotify.Remove)
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if got, want := g.loadTimes(), []time.Duration{time.Second, 4 * time.Second}; !equalDurations(got, want) {
			t.Errorf("load times = %v, want %v", got, want)
		}
		g.stop()
	})
}

func TestDebounceBoundedWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newLoopRig(t, time.Second)
		g.run()
		// An event every 600ms for 11.4s never leaves a quiet second;
		// reloads still happen at most 4s after the first event of each
		// burst: at 4s, then 4s after the event at 4.2s, then 4s after the
		// event at 8.4s.
		for i := range 20 {
			if i > 0 {
				time.Sleep(600 * time.Millisecond)
			}
			g.event(fsnotify.Write)
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		got := g.loadTimes()
		want := []time.Duration{4 * time.Second, 8200 * time.Millisecond, 12400 * time.Millisecond}
		if !equalDurations(got, want) {
			t.Errorf("load times = %v, want %v", got, want)
		}
		g.stop()
	})
}

func TestChmodIgnored(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newLoopRig(t, time.Second)
		g.run()
		g.event(fsnotify.Chmod)
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if got := g.loadTimes(); len(got) != 0 {
			t.Errorf("load times after chmod = %v, want none", got)
		}
		g.stop()
	})
}

func TestTriggerCoalesced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newLoopRig(t, time.Second)
		// Triggers before the loop runs collapse into one reload.
		g.r.Trigger()
		g.r.Trigger()
		g.r.Trigger()
		g.run()
		synctest.Wait()
		if got, want := g.loadTimes(), []time.Duration{0}; !equalDurations(got, want) {
			t.Errorf("load times = %v, want %v", got, want)
		}
		g.stop()
	})
}

func TestTriggerSupersedesPendingDebounce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newLoopRig(t, time.Second)
		g.run()
		g.event(fsnotify.Write)
		time.Sleep(200 * time.Millisecond)
		g.r.Trigger()
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if got, want := g.loadTimes(), []time.Duration{200 * time.Millisecond}; !equalDurations(got, want) {
			t.Errorf("load times = %v, want %v (the trigger's reload covers the event)", got, want)
		}
		g.src.mu.Lock()
		syncs := g.src.syncs
		g.src.mu.Unlock()
		if syncs != 2 { // the loop's first, and the trigger's
			t.Errorf("watch syncs = %d, want 2", syncs)
		}
		g.stop()
	})
}

func TestWatcherErrorReloads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newLoopRig(t, time.Second)
		g.run()
		g.src.errs <- fsnotify.ErrEventOverflow
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if got, want := g.loadTimes(), []time.Duration{time.Second}; !equalDurations(got, want) {
			t.Errorf("load times after overflow = %v, want %v", got, want)
		}
		g.stop()
	})
}

func TestLoopWatcherClosed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newLoopRig(t, time.Second)
		g.run()
		close(g.src.ev)
		if err := <-g.done; err == nil || errors.Is(err, context.Canceled) {
			t.Errorf("loop() after the watcher closed = %v, want an error", err)
		}
		g.cancel()
	})
}

func TestDefaultDebounce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newLoopRig(t, 0)
		g.run()
		g.event(fsnotify.Write)
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if got, want := g.loadTimes(), []time.Duration{DefaultDebounce}; !equalDurations(got, want) {
			t.Errorf("load times = %v, want %v", got, want)
		}
		g.stop()
	})
}

// TestLostWatchPolls: while the watch cannot be restored, the loop says so
// (WatchProblem, a failed OnReload), polls the tree every PollInterval and
// reloads when it changes, and once the watch is back it reloads and
// reports success again.
func TestLostWatchPolls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newLoopRig(t, time.Second)
		var reports []bool
		g.r.onReload = func(ok bool, _ error, _ time.Time) {
			g.mu.Lock()
			reports = append(reports, ok)
			g.mu.Unlock()
		}
		g.src.set(errors.New("no space left on device"), "a 1")
		g.run()
		synctest.Wait()
		if p := g.r.WatchProblem(); !strings.Contains(p, "no space left on device") {
			t.Fatalf("WatchProblem() = %q, want the sync error", p)
		}
		time.Sleep(3500 * time.Millisecond) // polls at 1s, 2s, 3s see no change
		synctest.Wait()
		if got := g.loadTimes(); len(got) != 0 {
			t.Errorf("load times = %v while nothing changed, want none", got)
		}
		g.src.set(errors.New("no space left on device"), "a 2")
		time.Sleep(time.Second) // the poll at 4s sees it
		synctest.Wait()
		g.src.set(nil, "a 2")
		time.Sleep(time.Second) // the poll at 5s restores the watch
		synctest.Wait()
		if got, want := g.loadTimes(), []time.Duration{4 * time.Second, 5 * time.Second}; !equalDurations(got, want) {
			t.Errorf("load times = %v, want %v", got, want)
		}
		if p := g.r.WatchProblem(); p != "" {
			t.Errorf("WatchProblem() after restore = %q, want none", p)
		}
		g.mu.Lock()
		got := append([]bool(nil), reports...)
		g.mu.Unlock()
		if want := []bool{false, false, true}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("OnReload outcomes = %v, want %v (lost, polled while lost, restored)", got, want)
		}
		g.stop()
	})
}
