package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

func main() {
	dir := flag.String("dir", "", "the package's directory, relative to the repository root (where gremlins ran)")
	minEfficacy := flag.Float64("min", 0, "the least efficacy, in percent, with the equivalent mutants set aside")
	flag.Parse()
	if *dir == "" || flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: mutants -dir PKGDIR [-min PERCENT] REPORT.json")
		os.Exit(2)
	}
	if err := run(os.Stdout, *dir, flag.Arg(0), *minEfficacy); err != nil {
		fmt.Fprintln(os.Stderr, "mutants:", err)
		os.Exit(1)
	}
}

func run(w io.Writer, dir, reportFile string, minEfficacy float64) error {
	src, err := os.ReadFile(reportFile)
	if err != nil {
		return err
	}
	rep, err := ParseReport(src)
	if err != nil {
		return fmt.Errorf("%s: %w", reportFile, err)
	}
	notes, err := ReadNotes(dir)
	if err != nil {
		return err
	}
	lines, err := readLines(dir, rep)
	if err != nil {
		return err
	}
	s, problems := Assess(rep, notes, lines)
	fmt.Fprintf(w, "%s: %s\n", dir, s)
	if s.Killed+s.Lived > 0 && s.NetEfficacy() < minEfficacy {
		problems = append(problems, fmt.Sprintf("efficacy %.2f%% with the equivalent mutants set aside, want at least %.2f%%", s.NetEfficacy(), minEfficacy))
	}
	if len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintf(w, "  %s\n", p)
		}
		return fmt.Errorf("%s: %d problem(s)", dir, len(problems))
	}
	return nil
}

// Report is what this command reads of gremlins' JSON report.
type Report struct {
	Files []File `json:"files"`
}

// File holds the mutants of one source file, named relative to the
// package's directory.
type File struct {
	Name      string   `json:"file_name"`
	Mutations []Mutant `json:"mutations"`
}

// Mutant is one mutation and what the tests made of it. Line and Column
// (1-based, in bytes) are the mutated operator's position.
type Mutant struct {
	Type   string `json:"type"`
	Status string `json:"status"`
	Line   int    `json:"line"`
	Column int    `json:"column"`
}

// The statuses gremlins reports.
const (
	Killed     = "KILLED"
	Lived      = "LIVED"
	NotCovered = "NOT COVERED"
	TimedOut   = "TIMED OUT"
	NotViable  = "NOT VIABLE"
	Skipped    = "SKIPPED"
)

// ParseReport decodes a gremlins JSON report.
func ParseReport(src []byte) (Report, error) {
	var r Report
	if err := json.Unmarshal(src, &r); err != nil {
		return Report{}, fmt.Errorf("mutants: decode report: %w", err)
	}
	return r, nil
}

// Note says that the mutants of Type in File whose operator lies inside
// Text on its line compute what the code computes.
type Note struct {
	Type, File, Text, Why string
	Where                 string // file:line of the note
}

var noteLine = regexp.MustCompile("^\\s*// mutant: ([A-Z_]+) (\\S+\\.go) `([^`]+)` (.*\\S)")

// ErrNote is returned by ReadNotes for a line that starts like a note but
// does not read as one.
var ErrNote = errors.New("mutants: a note reads `// mutant: TYPE FILE.go `text` why`")

// ReadNotes returns the notes in the _test.go files of dir.
func ReadNotes(dir string) ([]Note, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		return nil, err
	}
	var notes []Note
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		got, err := ParseNotes(filepath.Base(f), string(src))
		if err != nil {
			return nil, err
		}
		notes = append(notes, got...)
	}
	return notes, nil
}

// ParseNotes returns the notes in src, the text of the test file name.
func ParseNotes(name, src string) ([]Note, error) {
	var notes []Note
	sc := bufio.NewScanner(strings.NewReader(src))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if !strings.HasPrefix(strings.TrimSpace(line), "// mutant:") {
			continue
		}
		m := noteLine.FindStringSubmatch(line)
		if m == nil {
			return nil, fmt.Errorf("%s:%d: %w", name, n, ErrNote)
		}
		notes = append(notes, Note{Type: m[1], File: m[2], Text: m[3], Why: m[4], Where: fmt.Sprintf("%s:%d", name, n)})
	}
	return notes, sc.Err()
}

// Matches reports whether n stands for mutant m of file, whose mutated line
// reads line.
func (n Note) Matches(file string, m Mutant, line string) bool {
	if n.Type != m.Type || n.File != file {
		return false
	}
	col := m.Column - 1
	for from := 0; ; {
		i := strings.Index(line[from:], n.Text)
		if i < 0 {
			return false
		}
		start := from + i
		if start <= col && col < start+len(n.Text) {
			return true
		}
		from = start + 1
	}
}

// Lines maps a file name and a 1-based line number to the line's text.
type Lines map[string][]string

func (l Lines) at(file string, line int) string {
	if line < 1 || line > len(l[file]) {
		return ""
	}
	return l[file][line-1]
}

func readLines(dir string, r Report) (Lines, error) {
	lines := Lines{}
	for _, f := range r.Files {
		src, err := os.ReadFile(filepath.Join(dir, f.Name))
		if err != nil {
			return nil, err
		}
		lines[f.Name] = strings.Split(string(src), "\n")
	}
	return lines, nil
}

// Summary counts a package's mutants by what became of them.
type Summary struct {
	Killed, Lived, Equivalent, NotCovered, TimedOut, NotViable int
}

// Efficacy is killed over killed plus lived, in percent, as gremlins counts
// it.
func (s Summary) Efficacy() float64 { return percent(s.Killed, s.Killed+s.Lived) }

// NetEfficacy is Efficacy with the equivalent mutants set aside.
func (s Summary) NetEfficacy() float64 { return percent(s.Killed, s.Killed+s.Lived-s.Equivalent) }

// Coverage is killed plus lived over those and the mutants no test
// reaches, in percent, as gremlins counts it.
func (s Summary) Coverage() float64 {
	return percent(s.Killed+s.Lived, s.Killed+s.Lived+s.NotCovered)
}

func percent(a, b int) float64 {
	if b == 0 {
		return 100
	}
	return 100 * float64(a) / float64(b)
}

func (s Summary) String() string {
	return fmt.Sprintf("killed %d, lived %d (%d equivalent), not covered %d, timed out %d, not viable %d; efficacy %.2f%% (%.2f%% without the equivalent), mutant coverage %.2f%%",
		s.Killed, s.Lived, s.Equivalent, s.NotCovered, s.TimedOut, s.NotViable, s.Efficacy(), s.NetEfficacy(), s.Coverage())
}

// Assess counts the mutants of r, setting aside the living ones a note
// stands for, and lists the problems: a living mutant without a note, and a
// note that stands for no living mutant of a file the run mutated (a run
// narrowed to some files skips the others' mutants).
func Assess(r Report, notes []Note, lines Lines) (Summary, []string) {
	var s Summary
	var problems []string
	used := make([]bool, len(notes))
	ran := map[string]bool{}
	for _, f := range r.Files {
		for _, m := range f.Mutations {
			ran[f.Name] = ran[f.Name] || m.Status != Skipped
			switch m.Status {
			case Killed:
				s.Killed++
			case NotCovered:
				s.NotCovered++
			case TimedOut:
				s.TimedOut++
			case NotViable:
				s.NotViable++
			case Lived:
				s.Lived++
				noted := false
				for i, n := range notes {
					if n.Matches(f.Name, m, lines.at(f.Name, m.Line)) {
						used[i], noted = true, true
					}
				}
				if noted {
					s.Equivalent++
					continue
				}
				problems = append(problems, fmt.Sprintf("LIVED %s at %s:%d:%d: %s", m.Type, f.Name, m.Line, m.Column, strings.TrimSpace(lines.at(f.Name, m.Line))))
			}
		}
	}
	for i, n := range notes {
		if !used[i] && ran[n.File] {
			problems = append(problems, fmt.Sprintf("%s: the note on %s %s `%s` stands for no living mutant", n.Where, n.Type, n.File, n.Text))
		}
	}
	return s, problems
}
