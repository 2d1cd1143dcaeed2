package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseNotes(t *testing.T) {
	tests := []struct {
		name    string
		src     string
		want    []Note
		wantErr error
	}{
		{"none", "package x\n\n// a comment\n", nil, nil},
		{"one", "package x\n\n// mutant: CONDITIONALS_BOUNDARY a.go `x < 0` zero gives zero.\n",
			[]Note{{Type: "CONDITIONALS_BOUNDARY", File: "a.go", Text: "x < 0", Why: "zero gives zero.", Where: "x_test.go:3"}}, nil},
		{"indented, in a block", "\t// mutant: INCREMENT_DECREMENT b.go `n++` counts only away from zero\n",
			[]Note{{Type: "INCREMENT_DECREMENT", File: "b.go", Text: "n++", Why: "counts only away from zero", Where: "x_test.go:1"}}, nil},
		{"no reason", "// mutant: CONDITIONALS_BOUNDARY a.go `x < 0`\n", nil, ErrNote},
		{"no backquotes", "// mutant: CONDITIONALS_BOUNDARY a.go x < 0 because\n", nil, ErrNote},
		{"not a Go file", "// mutant: CONDITIONALS_BOUNDARY a `x < 0` because\n", nil, ErrNote},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseNotes("x_test.go", tt.src)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("ParseNotes(%q) error = %v, want %v", tt.src, err, tt.wantErr)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("ParseNotes(%q) = %+v, want %+v", tt.src, got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("ParseNotes(%q)[%d] = %+v, want %+v", tt.src, i, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestNoteMatches(t *testing.T) {
	// Columns are 1-based bytes; the tab is column 1.
	const line = "\tneg := (a < 0) != (b < 0)"
	note := Note{Type: "CONDITIONALS_BOUNDARY", File: "int128.go", Text: "b < 0"}
	tests := []struct {
		name string
		n    Note
		file string
		m    Mutant
		want bool
	}{
		{"spans the operator", note, "int128.go", Mutant{Type: "CONDITIONALS_BOUNDARY", Column: 23}, true},
		{"text found twice on the line matches at either place", Note{Type: note.Type, File: note.File, Text: "< 0"}, "int128.go", Mutant{Type: "CONDITIONALS_BOUNDARY", Column: 12}, true},
		{"another operator on the line", note, "int128.go", Mutant{Type: "CONDITIONALS_BOUNDARY", Column: 12}, false},
		{"another mutator", note, "int128.go", Mutant{Type: "CONDITIONALS_NEGATION", Column: 23}, false},
		{"another file", note, "level.go", Mutant{Type: "CONDITIONALS_BOUNDARY", Column: 23}, false},
		{"first byte of the text", Note{Type: note.Type, File: note.File, Text: "<"}, "int128.go", Mutant{Type: "CONDITIONALS_BOUNDARY", Column: 23}, true},
		{"just past the text", Note{Type: note.Type, File: note.File, Text: "(b"}, "int128.go", Mutant{Type: "CONDITIONALS_BOUNDARY", Column: 23}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.n.Matches(tt.file, tt.m, line); got != tt.want {
				t.Errorf("Note%+v.Matches(%s, %+v, %q) = %t, want %t", tt.n, tt.file, tt.m, line, got, tt.want)
			}
		})
	}
}

func TestAssess(t *testing.T) {
	lines := Lines{"a.go": {"package a", "\tif x < 0 {", "\tn++"}}
	report := Report{Files: []File{{Name: "a.go", Mutations: []Mutant{
		{Type: "CONDITIONALS_BOUNDARY", Status: Lived, Line: 2, Column: 7},
		{Type: "CONDITIONALS_NEGATION", Status: Killed, Line: 2, Column: 7},
		{Type: "INCREMENT_DECREMENT", Status: Killed, Line: 3, Column: 3},
		{Type: "ARITHMETIC_BASE", Status: NotCovered, Line: 3, Column: 3},
		{Type: "ARITHMETIC_BASE", Status: TimedOut, Line: 3, Column: 3},
	}}, {Name: "b.go", Mutations: []Mutant{
		{Type: "CONDITIONALS_BOUNDARY", Status: Skipped, Line: 1, Column: 1},
	}}}}
	boundary := Note{Type: "CONDITIONALS_BOUNDARY", File: "a.go", Text: "x < 0", Where: "a_test.go:1"}
	stale := Note{Type: "INCREMENT_DECREMENT", File: "a.go", Text: "n++", Where: "a_test.go:2"}
	tests := []struct {
		name         string
		notes        []Note
		want         Summary
		wantProblems []string
	}{
		{"a living mutant without a note", nil,
			Summary{Killed: 2, Lived: 1, NotCovered: 1, TimedOut: 1},
			[]string{"LIVED CONDITIONALS_BOUNDARY at a.go:2:7: if x < 0 {"}},
		{"noted", []Note{boundary},
			Summary{Killed: 2, Lived: 1, Equivalent: 1, NotCovered: 1, TimedOut: 1}, nil},
		{"a note on a file the run skipped", []Note{boundary, {Type: "CONDITIONALS_BOUNDARY", File: "b.go", Text: "x", Where: "b_test.go:1"}},
			Summary{Killed: 2, Lived: 1, Equivalent: 1, NotCovered: 1, TimedOut: 1}, nil},
		{"a note on a killed mutant", []Note{boundary, stale},
			Summary{Killed: 2, Lived: 1, Equivalent: 1, NotCovered: 1, TimedOut: 1},
			[]string{"a_test.go:2: the note on INCREMENT_DECREMENT a.go `n++` stands for no living mutant"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, problems := Assess(report, tt.notes, lines)
			if got != tt.want {
				t.Errorf("Assess(notes %v) = %+v, want %+v", tt.notes, got, tt.want)
			}
			if strings.Join(problems, "\n") != strings.Join(tt.wantProblems, "\n") {
				t.Errorf("Assess(notes %v) problems = %q, want %q", tt.notes, problems, tt.wantProblems)
			}
		})
	}
}

func TestSummaryFigures(t *testing.T) {
	tests := []struct {
		name                   string
		s                      Summary
		efficacy, net, covered float64
	}{
		{"tokenbucket before", Summary{Killed: 115, Lived: 9, Equivalent: 9, NotCovered: 31}, 100 * 115.0 / 124, 100, 80},
		{"one unexplained", Summary{Killed: 19, Lived: 2, Equivalent: 1}, 100 * 19.0 / 21, 95, 100},
		{"nothing ran", Summary{NotCovered: 3}, 100, 100, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.s.Efficacy(); got != tt.efficacy {
				t.Errorf("%+v.Efficacy() = %v, want %v", tt.s, got, tt.efficacy)
			}
			if got := tt.s.NetEfficacy(); got != tt.net {
				t.Errorf("%+v.NetEfficacy() = %v, want %v", tt.s, got, tt.net)
			}
			if got := tt.s.Coverage(); got != tt.covered {
				t.Errorf("%+v.Coverage() = %v, want %v", tt.s, got, tt.covered)
			}
		})
	}
}

// TestRun runs the command over a package of its own making: the figures
// print, and a living mutant without a note or an efficacy below -min
// fails.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.go", "package a\n\nfunc f(x int) bool {\n\treturn x < 0\n}\n")
	write("report.json", `{"go_module":"m","files":[{"file_name":"a.go","mutations":[
		{"type":"CONDITIONALS_BOUNDARY","status":"LIVED","line":4,"column":11},
		{"type":"CONDITIONALS_NEGATION","status":"KILLED","line":4,"column":11}]}]}`)
	report := filepath.Join(dir, "report.json")
	tests := []struct {
		name    string
		test    string
		min     float64
		wantErr bool
		wantOut string
	}{
		{"unexplained", "package a\n", 0, true, "LIVED CONDITIONALS_BOUNDARY at a.go:4:11"},
		{"noted", "package a\n\n// mutant: CONDITIONALS_BOUNDARY a.go `x < 0` f is never called with 0.\n", 95, false,
			"efficacy 50.00% (100.00% without the equivalent)"},
		{"below the floor", "package a\n", 60, true, "want at least 60.00%"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			write("a_test.go", tt.test)
			var out strings.Builder
			err := run(&out, dir, report, tt.min)
			if (err != nil) != tt.wantErr {
				t.Errorf("run(%s, -min %v) error = %v, want error %t", dir, tt.min, err, tt.wantErr)
			}
			if !strings.Contains(out.String(), tt.wantOut) {
				t.Errorf("run(%s, -min %v) printed %q, want it to contain %q", dir, tt.min, out.String(), tt.wantOut)
			}
		})
	}
}
