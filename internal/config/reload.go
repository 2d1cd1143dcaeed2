package config

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/sirupsen/logrus"

	"github.com/dynalimit/dynalimit/pkg/descriptors"
)

// DefaultDebounce is how long the Reloader waits after the last file event
// of a burst before it reloads.
const DefaultDebounce = time.Second

// maxDebounceFactor bounds how long a steady stream of events can postpone a
// reload: at most maxDebounceFactor×Debounce after the first event of a burst.
const maxDebounceFactor = 4

// maxWatchDepth bounds the directory tree the Reloader watches, so a
// symlink loop cannot make it recurse forever.
const maxWatchDepth = 16

// ReloaderOptions configure a Reloader. Dir and Load are required.
type ReloaderOptions struct {
	// Dir is the descriptor directory passed to Load (Settings.ConfigDir).
	Dir string
	// WatchDir is the directory watched, recursively, for changes
	// (Settings.WatchDir); empty means Dir. It must contain Dir.
	WatchDir string
	// Load reads and compiles the descriptor directory (Settings.Loader).
	// It must not return a nil config without an error.
	Load func(dir string) (*descriptors.Config, error)
	// Debounce is the quiet time after a file event before reloading;
	// zero means DefaultDebounce.
	Debounce time.Duration
	// Logger receives one entry per reload; nil means the standard logger.
	Logger *logrus.Entry
	// OnReload, when set, is called after every load attempt, including the
	// first one that NewReloader makes, with the outcome and Now's time. It
	// runs on the reloading goroutine and must not call Reload.
	OnReload func(ok bool, err error, at time.Time)
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Reloader holds the live descriptor configuration and replaces it when the
// files change, when Trigger is called, or when Reload is called. A failed
// load never replaces the live configuration.
//
// Current is safe for concurrent use and costs one atomic load; the
// configuration it returns is immutable and never nil. Run must be called at
// most once at a time.
type Reloader struct {
	dir, watchDir string
	load          func(dir string) (*descriptors.Config, error)
	debounce      time.Duration
	log           *logrus.Entry
	onReload      func(ok bool, err error, at time.Time)
	now           func() time.Time

	current atomic.Pointer[descriptors.Config]
	trigger chan struct{}
	running atomic.Bool
	mu      sync.Mutex // serialises loads
}

// NewReloader validates o and loads the configuration once; a failed first
// load is returned as an error.
func NewReloader(o ReloaderOptions) (*Reloader, error) {
	if o.Dir == "" {
		return nil, errors.New("config: reloader: Dir is empty")
	}
	if o.Load == nil {
		return nil, errors.New("config: reloader: Load is nil")
	}
	if o.Debounce < 0 {
		return nil, fmt.Errorf("config: reloader: Debounce %s is negative", o.Debounce)
	}
	r := &Reloader{
		dir:      o.Dir,
		watchDir: o.WatchDir,
		load:     o.Load,
		debounce: o.Debounce,
		log:      o.Logger,
		onReload: o.OnReload,
		now:      o.Now,
		trigger:  make(chan struct{}, 1),
	}
	if r.watchDir == "" {
		r.watchDir = r.dir
	}
	if rel, err := filepath.Rel(r.watchDir, r.dir); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return nil, fmt.Errorf("config: reloader: Dir %s is not under WatchDir %s", r.dir, r.watchDir)
	}
	if r.debounce == 0 {
		r.debounce = DefaultDebounce
	}
	if r.log == nil {
		r.log = logrus.NewEntry(logrus.StandardLogger()).WithField("component", "config")
	}
	if r.now == nil {
		r.now = time.Now
	}
	if err := r.reload("start", false); err != nil {
		return nil, err
	}
	return r, nil
}

// Current returns the live configuration.
func (r *Reloader) Current() *descriptors.Config { return r.current.Load() }

// Trigger asks Run to reload now, e.g. on SIGHUP. It never blocks; triggers
// that arrive before Run gets to them are coalesced into one reload.
func (r *Reloader) Trigger() {
	select {
	case r.trigger <- struct{}{}:
	default:
	}
}

// Reload loads the configuration now and, if it loads, makes it live; if
// not, it keeps the old one and returns the error without logging it. Safe
// to call concurrently with Run.
func (r *Reloader) Reload() error { return r.reload("manual", false) }

// reload loads and swaps on success, logs the outcome (a failure only when
// logFailure; it is returned either way), then reports to OnReload.
func (r *Reloader) reload(cause string, logFailure bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	start := r.now()
	cfg, err := r.load(r.dir)
	if err == nil && cfg == nil {
		err = errors.New("loader returned no configuration")
	}
	at := r.now()
	fields := logrus.Fields{"dir": r.dir, "cause": cause, "duration_ms": at.Sub(start).Milliseconds()}
	if err != nil {
		err = fmt.Errorf("config: load %s: %w", r.dir, err)
		if logFailure {
			r.logFailure(fields, err)
		}
		if r.onReload != nil {
			r.onReload(false, err, at)
		}
		return err
	}
	r.current.Store(cfg)
	if warnings := cfg.Warnings(); len(warnings) > 0 {
		ws := make([]string, len(warnings))
		for i, w := range warnings {
			ws[i] = w.Error()
		}
		r.log.WithFields(fields).WithField("warnings", ws).Warn("descriptor configuration has keys that are ignored")
	}
	r.log.WithFields(fields).Info("descriptor configuration loaded")
	if r.onReload != nil {
		r.onReload(true, nil, at)
	}
	return nil
}

// logFailure logs a failed reload once, with every problem the loader
// reported as one entry of the "problems" field (file:line: key: message).
func (r *Reloader) logFailure(fields logrus.Fields, err error) {
	var derr *descriptors.Error
	if errors.As(err, &derr) {
		problems := make([]string, len(derr.Problems))
		for i, p := range derr.Problems {
			problems[i] = fmt.Sprint(p)
		}
		fields["problems"] = problems
	}
	r.log.WithFields(fields).WithError(err).Error("descriptor reload failed; keeping the previous configuration")
}

// Run watches WatchDir and reloads after each burst of changes (debounced)
// and on each Trigger, until ctx ends; then it closes the watcher and
// returns nil. It returns an error if the watch cannot be set up or the
// watcher fails for good. Load failures are not errors of Run: they are
// logged and reported to OnReload.
func (r *Reloader) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return errors.New("config: reloader: Run is already running")
	}
	defer r.running.Store(false)

	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("config: watch %s: %w", r.watchDir, err)
	}
	defer w.Close()
	src := newFSSource(w, r.watchDir)
	if err := src.sync(); err != nil {
		return err
	}
	return r.loop(ctx, src)
}

// source is what the debounce loop reads: file events and watcher errors,
// and a way to bring the watch list up to date with the tree.
type source interface {
	events() <-chan fsnotify.Event
	errors() <-chan error
	relevant(ev fsnotify.Event) bool
	sync() error
}

// loop is Run's select loop. A relevant event starts or extends the
// debounce timer; the timer reloads; a trigger reloads at once and cancels a
// pending debounce, since the reload it does covers those events.
func (r *Reloader) loop(ctx context.Context, src source) error {
	var (
		timer       *time.Timer
		timerC      <-chan time.Time
		burstStart  time.Time
		maxDebounce = maxDebounceFactor * r.debounce
	)
	stopTimer := func() {
		if timer != nil {
			timer.Stop()
		}
		timerC = nil
	}
	defer stopTimer()
	schedule := func() {
		now := time.Now()
		if timerC == nil {
			burstStart = now
		}
		wait := r.debounce
		if remaining := burstStart.Add(maxDebounce).Sub(now); remaining < wait {
			wait = max(remaining, 0)
		}
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		timerC = timer.C
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-src.events():
			if !ok {
				return errors.New("config: watcher closed unexpectedly")
			}
			if src.relevant(ev) {
				schedule()
			}
		case err, ok := <-src.errors():
			if !ok {
				return errors.New("config: watcher closed unexpectedly")
			}
			// An overflow loses events; reloading is the only safe answer.
			r.log.WithError(err).Warn("descriptor watcher error; reloading")
			schedule()
		case <-timerC:
			timerC = nil
			if err := src.sync(); err != nil {
				r.log.WithError(err).Warn("descriptor watch list incomplete")
			}
			_ = r.reload("watch", true) // logged and reported inside
		case <-r.trigger:
			stopTimer()
			if err := src.sync(); err != nil {
				r.log.WithError(err).Warn("descriptor watch list incomplete")
			}
			_ = r.reload("trigger", true) // logged and reported inside
		}
	}
}

// fsSource watches a directory tree with fsnotify. fsnotify watches single
// directories, so fsSource adds one watch per directory under root,
// following symlinks to directories (Kubernetes' ..data), once per real
// directory, and re-syncs after changes so that new directories and
// symlink swaps are watched too. If root itself is a symlink, its parent is
// watched as well, for events on root's name only, so that swapping the
// link is seen.
type fsSource struct {
	w       *fsnotify.Watcher
	root    string
	parent  string            // watched for root's link only; "" if root is no link
	watched map[string]string // path as added → real path it resolved to
}

func newFSSource(w *fsnotify.Watcher, root string) *fsSource {
	return &fsSource{w: w, root: filepath.Clean(root), watched: map[string]string{}}
}

func (s *fsSource) events() <-chan fsnotify.Event { return s.w.Events }
func (s *fsSource) errors() <-chan error          { return s.w.Errors }

// relevant drops events that cannot change what Load reads: attribute
// changes alone, and events on the root's parent about other names.
func (s *fsSource) relevant(ev fsnotify.Event) bool {
	if ev.Op&^fsnotify.Chmod == 0 {
		return false
	}
	if s.parent != "" && filepath.Dir(ev.Name) == s.parent && filepath.Clean(ev.Name) != s.root {
		return false
	}
	return true
}

// sync makes the watch list equal the directories now under root, re-adding
// any path whose symlinks now resolve elsewhere. A failure to watch root is
// an error; a failure on a subdirectory is returned joined but the rest is
// watched, since it may be racing a removal.
func (s *fsSource) sync() error {
	want := map[string]string{}
	s.parent = ""
	if fi, err := os.Lstat(s.root); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		s.parent = filepath.Dir(s.root)
		want[s.parent] = s.parent
		if real, err := filepath.EvalSymlinks(s.parent); err == nil {
			want[s.parent] = real
		}
	}
	if err := collectDirs(s.root, 0, want, map[string]bool{}); err != nil {
		return fmt.Errorf("config: watch %s: %w", s.root, err)
	}
	for p, real := range s.watched {
		if want[p] != real {
			// The directory may be gone, and its watch with it; either way
			// this watch is stale.
			_ = s.w.Remove(p)
			delete(s.watched, p)
		}
	}
	var errs []error
	for p, real := range want {
		if _, ok := s.watched[p]; ok {
			continue
		}
		if err := s.w.Add(p); err != nil {
			if p == s.root {
				return fmt.Errorf("config: watch %s: %w", p, err)
			}
			errs = append(errs, fmt.Errorf("config: watch %s: %w", p, err))
			continue
		}
		s.watched[p] = real
	}
	return errors.Join(errs...)
}

// collectDirs records dir and every directory beneath it (following
// symlinks) in want, path → real path, skipping directories whose real path
// is already in seen.
func collectDirs(dir string, depth int, want map[string]string, seen map[string]bool) error {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return err
	}
	if seen[real] || depth > maxWatchDepth {
		return nil
	}
	seen[real] = true
	want[dir] = real
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		if e.Type()&os.ModeSymlink != 0 {
			fi, err := os.Stat(p)
			if err != nil || !fi.IsDir() {
				continue // dangling, or a link to a file
			}
		} else if !e.IsDir() {
			continue
		}
		// A subdirectory that vanishes mid-walk is not an error: its
		// removal is an event, which re-syncs.
		_ = collectDirs(p, depth+1, want, seen)
	}
	return nil
}
