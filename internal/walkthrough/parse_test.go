package walkthrough

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// kind is what a block is run as.
type kind int

const (
	background kind = iota // a second terminal, waited on until ready
	console                // commands and their expected output
	commands               // commands that must exit 0
	interrupt              // Ctrl-C in the last background terminal, then lines typed there
)

// block is one marked block of the README.
type block struct {
	kind  kind
	line  int      // of the opening fence, 1-based
	ready []string // background: the targets to wait for
	text  string   // background, interrupt: the script
	cmds  []command
}

// command is one foreground command and, in a console block, its output.
type command struct {
	line int // 1-based
	cmd  string
	want string
}

// walk is one walkthrough: its blocks in README order.
type walk struct {
	name   string
	blocks []block
}

var marker = regexp.MustCompile(`^<!--\s*walkthrough\s+([^:]+?)\s*(?::\s*(?:background\s+(.+?)|(stop)))?\s*-->\s*$`)

// parse returns the walkthroughs of a README, in the order their first
// blocks appear.
func parse(readme string) ([]walk, error) {
	lines := strings.Split(readme, "\n")
	var walks []walk
	index := map[string]int{}
	for i := 0; i < len(lines); i++ {
		m := marker.FindStringSubmatch(strings.TrimSpace(lines[i]))
		if m == nil {
			if strings.Contains(lines[i], "<!-- walkthrough") {
				return nil, fmt.Errorf("README.md:%d: a walkthrough marker this harness cannot read: %q", i+1, lines[i])
			}
			continue
		}
		name, ready, stop := m[1], strings.Fields(m[2]), m[3] != ""
		j := i + 1
		for j < len(lines) && strings.TrimSpace(lines[j]) == "" {
			j++
		}
		if j == len(lines) || !strings.HasPrefix(lines[j], "```") {
			return nil, fmt.Errorf("README.md:%d: walkthrough %q: no fenced block after the marker", i+1, name)
		}
		lang := strings.TrimSpace(strings.TrimPrefix(lines[j], "```"))
		end := j + 1
		for end < len(lines) && !strings.HasPrefix(lines[end], "```") {
			end++
		}
		if end == len(lines) {
			return nil, fmt.Errorf("README.md:%d: walkthrough %q: the block is not closed", j+1, name)
		}
		body := lines[j+1 : end]
		b, err := newBlock(lang, ready, stop, j+1, body)
		if err != nil {
			return nil, fmt.Errorf("README.md:%d: walkthrough %q: %w", j+1, name, err)
		}
		k, ok := index[name]
		if !ok {
			k = len(walks)
			index[name] = k
			walks = append(walks, walk{name: name})
		}
		if b.kind == interrupt && !slices.ContainsFunc(walks[k].blocks, func(b block) bool { return b.kind == background }) {
			return nil, fmt.Errorf("README.md:%d: walkthrough %q: a stop block with no background block before it", i+1, name)
		}
		walks[k].blocks = append(walks[k].blocks, b)
		i = end
	}
	return walks, nil
}

// newBlock reads one block's body; fence is the line number of its
// opening fence.
func newBlock(lang string, ready []string, stop bool, fence int, body []string) (block, error) {
	b := block{line: fence}
	switch {
	case stop:
		if lang != "sh" {
			return b, fmt.Errorf("a stop block must be ```sh, not %q", lang)
		}
		b.kind, b.text = interrupt, strings.Join(body, "\n")+"\n"
		return b, nil
	case len(ready) > 0:
		if lang != "sh" {
			return b, fmt.Errorf("a background block must be ```sh, not %q", lang)
		}
		for _, r := range ready {
			if !strings.HasPrefix(r, "http://") && !strings.HasPrefix(r, "tcp://") {
				return b, fmt.Errorf("READY %q: want http://… or tcp://host:port", r)
			}
		}
		b.kind, b.ready, b.text = background, ready, strings.Join(body, "\n")+"\n"
		return b, nil
	case lang == "console":
		b.kind = console
		return b, b.readConsole(fence, body)
	case lang == "sh":
		b.kind = commands
		for i := 0; i < len(body); i++ {
			line := strings.TrimSpace(body[i])
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			c := command{line: fence + 1 + i}
			c.cmd, i = joined(body, i)
			b.cmds = append(b.cmds, c)
		}
		if len(b.cmds) == 0 {
			return b, fmt.Errorf("no command")
		}
		return b, nil
	}
	return b, fmt.Errorf("a foreground block must be ```console or ```sh, not %q", lang)
}

// readConsole reads "$ " commands and the output each expects.
func (b *block) readConsole(fence int, body []string) error {
	for i := 0; i < len(body); i++ {
		rest, ok := strings.CutPrefix(body[i], "$ ")
		if !ok {
			if len(b.cmds) == 0 {
				return fmt.Errorf("line %d: output before the first \"$ \" command", fence+1+i)
			}
			last := &b.cmds[len(b.cmds)-1]
			last.want += body[i] + "\n"
			continue
		}
		c := command{line: fence + 1 + i}
		body[i] = rest
		c.cmd, i = joined(body, i)
		b.cmds = append(b.cmds, c)
	}
	if len(b.cmds) == 0 {
		return fmt.Errorf("no \"$ \" command")
	}
	return nil
}

// joined returns the command starting at body[i] with its backslash
// continuations, and the index of its last line.
func joined(body []string, i int) (string, int) {
	cmd := body[i]
	for strings.HasSuffix(strings.TrimRight(cmd, " \t"), `\`) && i+1 < len(body) {
		i++
		cmd += "\n" + body[i]
	}
	return cmd, i
}

// matches reports whether got is want, where each "…" of want stands for
// any text of one line (at least one character): a generated id, say.
func matches(got, want string) bool {
	if !strings.Contains(want, "…") {
		return got == want
	}
	parts := strings.Split(want, "…")
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return regexp.MustCompile("^" + strings.Join(parts, "[^\n]+") + "$").MatchString(got)
}

// normalize trims trailing blanks (and carriage returns) of every line and
// blank lines at the end.
func normalize(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " \t\r")
	}
	for len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return strings.Join(lines, "\n")
}

// names returns the names of walks, in order.
func names(walks []walk) []string {
	var out []string
	for _, w := range walks {
		out = append(out, w.name)
	}
	return slices.Clip(out)
}
