package descriptors

import (
	"fmt"
	"strings"
)

// indentErrors are the yaml.v3 parser errors a misindented line causes.
// yaml.v3 reports them at the line before the block the parser was in (its
// context mark, 0-based, printed as if 1-based), not at the line to fix.
var indentErrors = []string{
	"did not find expected key",
	"did not find expected '-' indicator",
	"did not find expected node content",
	"mapping values are not allowed in this context",
}

// misindented finds the first line of data whose indentation lines up with
// no open block above it: the line a user must fix after an indentation
// error. It returns the 1-based line, its indentation and the indentations
// that would line up (the block it would close into and the one it left),
// or line 0 when it finds none or meets YAML it does not follow (flow
// collections over several lines, quoted scalars over several lines).
func misindented(data []byte) (line, indent int, want []int) {
	stack := []int{0} // indentations of the open blocks, innermost last
	child := -1       // indentation of the line that opened a block; the next deeper line opens it
	scalar := -1      // inside a block scalar: lines deeper than this belong to it
	for i, raw := range strings.Split(string(data), "\n") {
		text := strings.TrimRight(raw, " \r")
		body := strings.TrimLeft(text, " ")
		n := len(text) - len(body)
		if body == "" || strings.HasPrefix(body, "#") {
			continue
		}
		if scalar >= 0 {
			if n > scalar {
				continue
			}
			scalar = -1
		}
		if n == 0 && (body == "---" || strings.HasPrefix(body, "--- ") || body == "...") {
			stack, child = []int{0}, -1
			continue
		}
		if strings.HasPrefix(body, "\t") {
			return 0, 0, nil // a tab: the scanner's own error names the line
		}
		if child >= 0 && n > child {
			stack = append(stack, n)
		}
		child = -1
		left := -1 // the innermost block this line closes
		for len(stack) > 1 && stack[len(stack)-1] > n {
			left = stack[len(stack)-1]
			stack = stack[:len(stack)-1]
		}
		if top := stack[len(stack)-1]; top != n {
			want = []int{top}
			if left >= 0 {
				want = append(want, left)
			}
			return i + 1, n, want
		}
		// What the line opens: a sequence entry's content, a key's block.
		col := n
		for {
			rest, ok := strings.CutPrefix(body, "-")
			if !ok || (rest != "" && rest[0] != ' ') {
				break
			}
			dash := col
			trimmed := strings.TrimLeft(rest, " ")
			col += 1 + len(rest) - len(trimmed)
			body = trimmed
			if body == "" {
				child = dash // "-" alone: its block is on the next, deeper line
				break
			}
			stack = append(stack, col)
		}
		if body == "" {
			continue
		}
		if strings.ContainsAny(body[:1], "[{\"'") && !balanced(body) {
			return 0, 0, nil
		}
		_, v, isKey := cutKey(body)
		if !isKey {
			continue
		}
		v = strings.TrimSpace(stripComment(v))
		switch {
		case v == "" || strings.HasPrefix(v, "&") || strings.HasPrefix(v, "!"):
			if !strings.Contains(v, " ") {
				child = col
			}
		case strings.HasPrefix(v, "|") || strings.HasPrefix(v, ">"):
			scalar = col
		case strings.ContainsAny(v[:1], "[{\"'") && !balanced(v):
			return 0, 0, nil
		}
	}
	return 0, 0, nil
}

// cutKey splits "key: value" (or "key:") at the mapping colon.
func cutKey(s string) (key, value string, ok bool) {
	if s[0] == '"' || s[0] == '\'' {
		end := strings.IndexByte(s[1:], s[0])
		if end < 0 {
			return "", "", false
		}
		s2 := s[end+2:]
		if strings.HasPrefix(s2, ":") && (len(s2) == 1 || s2[1] == ' ') {
			return s[:end+2], s2[1:], true
		}
		return "", "", false
	}
	for i := 0; i < len(s); i++ {
		if s[i] == ':' && (i+1 == len(s) || s[i+1] == ' ') {
			return s[:i], s[i+1:], true
		}
		if s[i] == ' ' && i+1 < len(s) && s[i+1] == '#' {
			return "", "", false
		}
	}
	return "", "", false
}

// stripComment drops a trailing " #…" comment from an unquoted value.
func stripComment(v string) string {
	if i := strings.Index(v, " #"); i >= 0 && !strings.ContainsAny(v[:i], "\"'") {
		return v[:i]
	}
	return v
}

// balanced reports whether a flow collection or quoted scalar that starts
// s ends on the same line.
func balanced(s string) bool {
	switch s[0] {
	case '"', '\'':
		return strings.Count(s, s[:1]) >= 2
	}
	return strings.Count(s, "[")+strings.Count(s, "{") == strings.Count(s, "]")+strings.Count(s, "}")
}

// indentHint rewrites a yaml.v3 indentation error: the line to fix and
// what would line up there. It returns the line and the message, or 0 when
// the error is not about indentation or the line cannot be found.
func indentHint(data []byte, yamlMsg string, reported int) (int, string) {
	kind := ""
	for _, e := range indentErrors {
		if strings.Contains(yamlMsg, e) {
			kind = e
		}
	}
	if kind == "" {
		return 0, ""
	}
	line, n, want := misindented(data)
	if line == 0 || line < reported {
		return 0, ""
	}
	return line, fmt.Sprintf("error loading config file: this line is indented %s, which lines up with no block above it: indent it %s, as the lines it belongs with are (yaml: %s)",
		spaces(n), spaces(want...), kind)
}

// tabHint says so when line (1-based) of data is indented with a tab, which
// YAML refuses; "" otherwise.
func tabHint(data []byte, line int) string {
	lines := strings.Split(string(data), "\n")
	if line < 1 || line > len(lines) {
		return ""
	}
	l := lines[line-1]
	if strings.Contains(l[:len(l)-len(strings.TrimLeft(l, " \t"))], "\t") {
		return "error loading config file: this line is indented with a tab; YAML indents with spaces only"
	}
	return ""
}

// spaces writes "1 space", "2 spaces", "2 or 4 spaces".
func spaces(n ...int) string {
	parts := make([]string, len(n))
	for i, v := range n {
		parts[i] = fmt.Sprint(v)
	}
	if len(n) == 1 && n[0] == 1 {
		return "1 space"
	}
	return strings.Join(parts, " or ") + " spaces"
}
