package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/fsnotify/fsnotify"
)

// source is what the debounce loop reads: file events and watcher errors,
// a way to bring the watch list up to date with the tree (an error means
// some directory is not watched), and a summary of the tree's files that
// changes when they do, for polling while the watch is lost.
type source interface {
	events() <-chan fsnotify.Event
	errors() <-chan error
	relevant(ev fsnotify.Event) bool
	sync() error
	summary() string
}

// fsSource watches a directory tree with fsnotify. fsnotify watches single
// directories, so fsSource adds one watch per directory under root,
// following symlinks to directories (Kubernetes' ..data), once per real
// directory, and re-syncs after changes so that new directories, symlink
// swaps and directories removed and recreated (a new directory under an old
// name, whose watch went with the old one) are watched too. The nearest
// existing ancestor of root is watched as well, for events on root's path
// only, so that root's removal, recreation or link swap is seen even while
// root itself cannot be watched.
type fsSource struct {
	w       *fsnotify.Watcher
	root    string
	anchor  string                 // watched for events on root's path; "" if none
	watched map[string]os.FileInfo // path as added → the directory it was then
}

func newFSSource(w *fsnotify.Watcher, root string) *fsSource {
	return &fsSource{w: w, root: filepath.Clean(root), watched: map[string]os.FileInfo{}}
}

func (s *fsSource) events() <-chan fsnotify.Event { return s.w.Events }
func (s *fsSource) errors() <-chan error          { return s.w.Errors }

// relevant drops events that cannot change what Load reads: attribute
// changes alone, and events in root's anchor about names off root's path.
func (s *fsSource) relevant(ev fsnotify.Event) bool {
	if ev.Op&^fsnotify.Chmod == 0 {
		return false
	}
	name := filepath.Clean(ev.Name)
	if s.anchor != "" && filepath.Dir(name) == s.anchor {
		return name == s.root || strings.HasPrefix(s.root, name+string(filepath.Separator))
	}
	return true
}

// sync makes the watch list equal the directories now under root, plus
// root's anchor, re-adding any path that now names another directory. It
// returns an error when some directory is not watched (root missing, or a
// watch that could not be added); everything else is watched regardless.
func (s *fsSource) sync() error {
	want := map[string]os.FileInfo{}
	s.anchor = ""
	for dir := filepath.Dir(s.root); dir != s.root; dir = filepath.Dir(dir) {
		if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
			s.anchor = dir
			want[dir] = fi
			break
		}
		if dir == filepath.Dir(dir) {
			break
		}
	}
	var errs []error
	if err := collectDirs(s.root, 0, want, map[string]bool{}); err != nil {
		errs = append(errs, fmt.Errorf("config: watch %s: %w", s.root, err))
	}
	live := map[string]bool{}
	for _, p := range s.w.WatchList() {
		live[p] = true
	}
	for p, fi := range s.watched {
		if now, ok := want[p]; !ok || !live[p] || !os.SameFile(fi, now) {
			// The directory may be gone, and its watch with it (a directory
			// recreated at once may even reuse the old inode, but not the
			// old watch); either way this watch is stale.
			_ = s.w.Remove(p)
			delete(s.watched, p)
		}
	}
	for p, fi := range want {
		if _, ok := s.watched[p]; ok {
			continue
		}
		if err := s.w.Add(p); err != nil {
			errs = append(errs, fmt.Errorf("config: watch %s: %w", p, err))
			continue
		}
		s.watched[p] = fi
	}
	return errors.Join(errs...)
}

// summary describes every regular file under root (following symlinks to
// directories, as the watch does) by path, size and modification time, or
// why root cannot be read.
func (s *fsSource) summary() string {
	dirs := map[string]os.FileInfo{}
	if err := collectDirs(s.root, 0, dirs, map[string]bool{}); err != nil {
		return "unreadable: " + err.Error()
	}
	paths := make([]string, 0, len(dirs))
	for p := range dirs {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var b strings.Builder
	for _, dir := range paths {
		entries, err := os.ReadDir(dir)
		if err != nil {
			fmt.Fprintf(&b, "%s: %v\n", dir, err)
			continue
		}
		for _, e := range entries {
			fi, err := os.Stat(filepath.Join(dir, e.Name()))
			if err != nil || fi.IsDir() {
				continue
			}
			fmt.Fprintf(&b, "%s/%s %d %d\n", dir, e.Name(), fi.Size(), fi.ModTime().UnixNano())
		}
	}
	return b.String()
}

// collectDirs records dir and every directory beneath it (following
// symlinks) in want, path → the directory it names, skipping directories
// whose real path is already in seen.
func collectDirs(dir string, depth int, want map[string]os.FileInfo, seen map[string]bool) error {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return err
	}
	if seen[real] || depth > maxWatchDepth {
		return nil
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	seen[real] = true
	want[dir] = fi
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
