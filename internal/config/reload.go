package config

import (
	"context"
	"errors"
	"fmt"
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

// DefaultPollInterval is how often a Reloader whose watch is lost tries to
// restore it and, meanwhile, looks for changes itself.
const DefaultPollInterval = time.Second

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
	// It must not return a nil config without an error. It may run more
	// than once at a time (a Reload while Run reloads); of loads that
	// overlap, the one that started last decides.
	Load func(dir string) (*descriptors.Config, error)
	// Debounce is the quiet time after a file event before reloading;
	// zero means DefaultDebounce.
	Debounce time.Duration
	// Logger receives one entry per reload; nil means the standard logger.
	Logger *logrus.Entry
	// OnReload, when set, is called after every load attempt, including the
	// first one that NewReloader makes, with the outcome and Now's time (a
	// load that a later one overtook is not reported). Calls are one at a
	// time, in the order the outcomes were decided, and never under the
	// Reloader's lock: OnReload may call the Reloader (Reload, Trigger,
	// Current, WatchProblem). An outcome decided while another goroutine is
	// reporting is reported by that goroutine, after the one under way.
	OnReload func(ok bool, err error, at time.Time)
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// PollInterval is how often a lost watch is retried and the tree
	// polled for changes meanwhile; zero means DefaultPollInterval.
	PollInterval time.Duration
	// StartEmpty (FORCE_START_WITHOUT_INITIAL_CONFIG): when the first load
	// fails, NewReloader logs it and serves an empty configuration (every
	// domain unknown, every answer OK) until a load succeeds, instead of
	// returning the error.
	StartEmpty bool
}

// Reloader holds the live descriptor configuration and replaces it when the
// files change, when Trigger is called, or when Reload is called. A failed
// load never replaces the live configuration.
//
// A watch that is lost (the watched directory removed, a watch that cannot
// be added) is retried every PollInterval, and the tree is polled for
// changes meanwhile; the directory's parent is watched too, so a directory
// that is removed and recreated is watched again as soon as it is back.
// While the watch is lost, WatchProblem says why and every reload is
// reported to OnReload as failed.
//
// Current and WatchProblem are safe for concurrent use; Current costs one
// atomic load, and the configuration it returns is immutable and never nil.
// Run must be called at most once at a time.
type Reloader struct {
	dir, watchDir string
	load          func(dir string) (*descriptors.Config, error)
	debounce      time.Duration
	pollInterval  time.Duration
	log           *logrus.Entry
	onReload      func(ok bool, err error, at time.Time)
	now           func() time.Time

	current atomic.Pointer[descriptors.Config]
	// watchLost holds why the watch is lost, nil while it is complete.
	watchLost atomic.Pointer[error]
	trigger   chan struct{}
	running   atomic.Bool

	// mu guards the fields below; no caller's code runs while it is held.
	mu        sync.Mutex
	started   uint64   // loads begun
	decided   uint64   // the load, by number, whose outcome is live
	reports   []report // outcomes decided and not yet given to OnReload
	reporting bool     // a goroutine is giving reports to OnReload
}

// report is one outcome for OnReload.
type report struct {
	ok  bool
	err error
	at  time.Time
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
	if o.PollInterval < 0 {
		return nil, fmt.Errorf("config: reloader: PollInterval %s is negative", o.PollInterval)
	}
	r := &Reloader{
		dir:          o.Dir,
		watchDir:     o.WatchDir,
		load:         o.Load,
		debounce:     o.Debounce,
		pollInterval: o.PollInterval,
		log:          o.Logger,
		onReload:     o.OnReload,
		now:          o.Now,
		trigger:      make(chan struct{}, 1),
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
	if r.pollInterval == 0 {
		r.pollInterval = DefaultPollInterval
	}
	if r.log == nil {
		r.log = logrus.NewEntry(logrus.StandardLogger()).WithField("component", "config")
	}
	if r.now == nil {
		r.now = time.Now
	}
	if err := r.reload("start", false); err != nil {
		if !o.StartEmpty {
			return nil, err
		}
		empty, perr := descriptors.Parse(nil, descriptors.Options{})
		if perr != nil {
			return nil, fmt.Errorf("config: reloader: empty configuration: %w", perr)
		}
		r.current.Store(empty)
		r.logFailure(logrus.Fields{"dir": r.dir, "cause": "start"}, err)
		r.log.Warn("starting without a descriptor configuration: every request answers OK until one loads")
	}
	return r, nil
}

// Current returns the live configuration.
func (r *Reloader) Current() *descriptors.Config { return r.current.Load() }

// WatchProblem returns why the descriptor watch is lost, or "" while Run
// watches every directory of the tree (and before Run starts).
func (r *Reloader) WatchProblem() string {
	if err := r.watchLost.Load(); err != nil {
		return (*err).Error()
	}
	return ""
}

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
// logFailure; it is returned either way), then reports to OnReload. Load
// runs outside the lock: the lock numbers the load when it starts and, when
// it ends, decides whether its outcome is still the newest (no load started
// later has been decided); only then is it made live, logged and reported.
func (r *Reloader) reload(cause string, logFailure bool) error {
	r.mu.Lock()
	r.started++
	seq := r.started
	r.mu.Unlock()

	start := r.now()
	cfg, err := r.load(r.dir)
	if err == nil && cfg == nil {
		err = errors.New("loader returned no configuration")
	}
	at := r.now()
	if err != nil {
		err = fmt.Errorf("config: load %s: %w", r.dir, err)
	}

	r.mu.Lock()
	newest := seq > r.decided
	if newest {
		r.decided = seq
		if err == nil {
			r.current.Store(cfg)
		}
		r.queue(r.outcome(err, at))
	}
	r.mu.Unlock()
	if !newest {
		return err
	}
	r.logOutcome(logrus.Fields{"dir": r.dir, "cause": cause, "duration_ms": at.Sub(start).Milliseconds()}, cfg, err, logFailure)
	r.deliver()
	return err
}

// outcome is the report of a load that ended with err at at: a
// configuration that loaded while the watch is lost is reported as a
// failure, since later changes may be missed.
func (r *Reloader) outcome(err error, at time.Time) report {
	if err != nil {
		return report{false, err, at}
	}
	if lost := r.watchLost.Load(); lost != nil {
		return report{false, *lost, at}
	}
	return report{true, nil, at}
}

// logOutcome logs a load that is live (cfg, or err when it failed; a
// failure only when logFailure).
func (r *Reloader) logOutcome(fields logrus.Fields, cfg *descriptors.Config, err error, logFailure bool) {
	if err != nil {
		if logFailure {
			r.logFailure(fields, err)
		}
		return
	}
	if warnings := cfg.Warnings(); len(warnings) > 0 {
		ws := make([]string, len(warnings))
		for i, w := range warnings {
			ws[i] = w.Error()
		}
		r.log.WithFields(fields).WithField("warnings", ws).Warn("descriptor configuration has keys that are ignored")
	}
	r.log.WithFields(fields).Info("descriptor configuration loaded")
}

// queue adds rep to the reports for OnReload. r.mu must be held.
func (r *Reloader) queue(rep report) {
	if r.onReload != nil {
		r.reports = append(r.reports, rep)
	}
}

// report queues one outcome for OnReload and delivers it.
func (r *Reloader) report(ok bool, err error, at time.Time) {
	r.mu.Lock()
	r.queue(report{ok, err, at})
	r.mu.Unlock()
	r.deliver()
}

// deliver gives the queued reports to OnReload, in order, one at a time and
// outside the lock, unless a goroutine is doing so already (it delivers
// them after the one under way; OnReload calling back into the Reloader is
// such a case).
func (r *Reloader) deliver() {
	r.mu.Lock()
	if r.reporting {
		r.mu.Unlock()
		return
	}
	r.reporting = true
	for len(r.reports) > 0 {
		rep := r.reports[0]
		r.reports = r.reports[1:]
		r.mu.Unlock()
		r.call(rep)
		r.mu.Lock()
	}
	r.reporting = false
	r.mu.Unlock()
}

// call gives rep to OnReload; if OnReload panics, another goroutine may
// deliver the reports left.
func (r *Reloader) call(rep report) {
	returned := false
	defer func() {
		if !returned {
			r.mu.Lock()
			r.reporting = false
			r.mu.Unlock()
		}
	}()
	r.onReload(rep.ok, rep.err, rep.at)
	returned = true
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
	defer r.watchLost.Store(nil)
	return r.loop(ctx, newFSSource(w, r.watchDir))
}

// loop is Run's select loop. A relevant event starts or extends the
// debounce timer; the timer reloads; a trigger reloads at once and cancels a
// pending debounce, since the reload it does covers those events. Every
// sync that fails marks the watch lost and starts polling: each tick retries
// the watch, reloads when it is back, and meanwhile reloads whenever the
// tree's summary changes.
func (r *Reloader) loop(ctx context.Context, src source) error {
	w := &watch{r: r, src: src}
	defer w.stop()
	w.sync()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-src.events():
			if !ok {
				return errors.New("config: watcher closed unexpectedly")
			}
			if src.relevant(ev) {
				w.schedule()
			}
		case err, ok := <-src.errors():
			if !ok {
				return errors.New("config: watcher closed unexpectedly")
			}
			// An overflow loses events; reloading is the only safe answer.
			r.log.WithError(err).Warn("descriptor watcher error; reloading")
			w.schedule()
		case <-w.timerC:
			w.timerC = nil
			w.sync()
			_ = r.reload("watch", true) // logged and reported inside
		case <-r.trigger:
			w.stopTimer()
			w.sync()
			_ = r.reload("trigger", true) // logged and reported inside
		case <-w.pollC:
			w.polled()
		}
	}
}

// watch is the state of Run's loop: the debounce timer of a burst of
// events and, while the watch is lost, the poll ticker. Only the loop's
// goroutine uses it.
type watch struct {
	r          *Reloader
	src        source
	timer      *time.Timer
	timerC     <-chan time.Time // nil when no reload is pending
	burstStart time.Time
	poll       *time.Ticker
	pollC      <-chan time.Time // nil while the watch is complete
	seen       string           // the tree's summary at the last poll
}

// stop stops the timer and the ticker.
func (w *watch) stop() {
	w.stopTimer()
	if w.poll != nil {
		w.poll.Stop()
	}
}

func (w *watch) stopTimer() {
	if w.timer != nil {
		w.timer.Stop()
	}
	w.timerC = nil
}

// schedule starts or extends the debounce timer: Debounce after this
// event, and no later than maxDebounceFactor×Debounce after the burst's
// first.
func (w *watch) schedule() {
	now := time.Now()
	if w.timerC == nil {
		w.burstStart = now
	}
	wait := w.r.debounce
	if remaining := w.burstStart.Add(maxDebounceFactor * w.r.debounce).Sub(now); remaining < wait {
		wait = max(remaining, 0)
	}
	if w.timer == nil {
		w.timer = time.NewTimer(wait)
	} else {
		w.timer.Reset(wait)
	}
	w.timerC = w.timer.C
}

// sync brings the watch list up to date and reports whether the watch is
// complete, marking it lost (and polling) or restored.
func (w *watch) sync() bool {
	r := w.r
	err := w.src.sync()
	if err == nil {
		if r.watchLost.Swap(nil) != nil {
			r.log.WithField("dir", r.watchDir).Info("descriptor watch restored")
			w.poll.Stop()
			w.pollC = nil
		}
		return true
	}
	lost := fmt.Errorf("config: descriptor watch lost, polling every %s: %w", r.pollInterval, err)
	if r.watchLost.Swap(&lost) == nil {
		r.log.WithError(err).WithField("dir", r.watchDir).Error("descriptor watch lost; polling until it is restored")
		r.report(false, lost, r.now())
		if w.poll == nil {
			w.poll = time.NewTicker(r.pollInterval)
		} else {
			w.poll.Reset(r.pollInterval)
		}
		w.pollC = w.poll.C
		w.seen = w.src.summary()
	}
	return false
}

// polled retries a lost watch, reloading when it is back, and meanwhile
// reloads when the tree's summary changed since the last poll.
func (w *watch) polled() {
	if w.sync() {
		w.stopTimer()
		_ = w.r.reload("watch restored", true)
		return
	}
	if now := w.src.summary(); now != w.seen {
		w.seen = now
		_ = w.r.reload("poll", true)
	}
}
