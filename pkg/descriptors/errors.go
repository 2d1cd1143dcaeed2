package descriptors

import (
	"strconv"
	"strings"
)

// Problem is one thing wrong with a descriptor file (or, from
// Config.Warnings, one thing ignored).
type Problem struct {
	// File is the file's name as given to Parse (a path for LoadDir).
	File string
	// Line is the 1-based line of the offending YAML node; 0 when unknown.
	Line int
	// Key is the YAML key at fault ("unit", "descriptors", ...); may be empty.
	Key string
	// Msg says what is wrong.
	Msg string
}

// Error returns "file:line: key: msg", leaving out the line when unknown and
// the key when empty.
func (p Problem) Error() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Line > 0 {
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(p.Line))
	}
	b.WriteString(": ")
	if p.Key != "" {
		b.WriteString(p.Key)
		b.WriteString(": ")
	}
	b.WriteString(p.Msg)
	return b.String()
}

// Error is returned by Parse and LoadDir: every problem found in every
// file, in file order.
type Error struct {
	Problems []Problem

	descriptorDir string
}

// DescriptorDir returns, when some of the files were Envoy bootstraps
// rather than descriptor files, the directory holding the files of the same
// load that are descriptor files: the directory to load instead. It is ""
// otherwise.
func (e *Error) DescriptorDir() string { return e.descriptorDir }

// Error lists every problem, one per line.
func (e *Error) Error() string {
	switch len(e.Problems) {
	case 0:
		return "descriptors: invalid configuration"
	case 1:
		return "descriptors: " + e.Problems[0].Error()
	}
	var b strings.Builder
	b.WriteString("descriptors: ")
	b.WriteString(strconv.Itoa(len(e.Problems)))
	b.WriteString(" problems:")
	for _, p := range e.Problems {
		b.WriteByte('\n')
		b.WriteString(p.Error())
	}
	return b.String()
}
