package descriptors

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// LoadDir reads every regular file under dir, recursively and whatever its
// extension, and parses them in sorted path order, as envoyproxy/ratelimit's
// runtime loader reads RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config. It follows
// symbolic links; it never descends into directories whose names start with
// ".." (the hidden targets of a Kubernetes ConfigMap volume, whose visible
// files are symlinks into them); with opts.IgnoreDotFiles it skips files and
// directories whose names start with ".". Problems name the file by its path
// under dir.
func LoadDir(dir string, opts Options) (*Config, error) {
	paths, problems := listFiles(dir, opts.IgnoreDotFiles)
	files := make([]File, 0, len(paths))
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			problems = append(problems, Problem{File: p, Msg: "read: " + err.Error()})
			continue
		}
		files = append(files, File{Name: p, Data: data})
	}
	if len(problems) > 0 {
		return nil, &Error{Problems: problems}
	}
	return Parse(files, opts)
}

// listFiles returns the sorted paths of the regular files under dir.
func listFiles(dir string, ignoreDot bool) ([]string, []Problem) {
	var paths []string
	var problems []Problem
	visited := map[string]bool{}
	var walk func(d string)
	walk = func(d string) {
		real, err := filepath.EvalSymlinks(d)
		if err != nil {
			problems = append(problems, Problem{File: d, Msg: "read directory: " + err.Error()})
			return
		}
		if visited[real] {
			return // a symlink loop, or a directory reached twice
		}
		visited[real] = true
		entries, err := os.ReadDir(d)
		if err != nil {
			problems = append(problems, Problem{File: d, Msg: "read directory: " + err.Error()})
			return
		}
		for _, e := range entries {
			name := e.Name()
			if ignoreDot && strings.HasPrefix(name, ".") {
				continue
			}
			p := filepath.Join(d, name)
			info, err := os.Stat(p) // follows symlinks
			if err != nil {
				problems = append(problems, Problem{File: p, Msg: "stat: " + err.Error()})
				continue
			}
			switch {
			case info.IsDir():
				if !strings.HasPrefix(name, "..") {
					walk(p)
				}
			case info.Mode().IsRegular():
				paths = append(paths, p)
			}
		}
	}
	walk(dir)
	sort.Strings(paths)
	return paths, problems
}
