package walkthrough

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/internal/testutil"
)

// want are the walkthroughs the README must have, in order: removing a
// marker fails here rather than silently running less.
var want = []string{"quick-start", "hierarchy", "envoy", "cost", "budgets", "dynamodb-local", "redis"}

// TestWalkthroughs runs every walkthrough of README.md as written, one after
// the other (they share the README's fixed ports). Only -short skips it.
func TestWalkthroughs(t *testing.T) {
	if testing.Short() {
		t.Skip("walkthrough: runs DynamoDB Local, Envoy and the binary, which -short does not")
	}
	root := testutil.RepoRoot(t)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	walks, err := parse(string(readme))
	if err != nil {
		t.Fatal(err)
	}
	if got := names(walks); !slices.Equal(got, want) {
		t.Fatalf("README.md walkthroughs = %q, want %q", got, want)
	}
	for _, w := range walks {
		t.Run(w.name, func(t *testing.T) {
			start := time.Now()
			(&runner{t: t, root: root}).run(w)
			t.Logf("walkthrough %q took %v", w.name, time.Since(start).Round(100*time.Millisecond))
		})
	}
}

// TestParse: what the markers and blocks become.
func TestParse(t *testing.T) {
	cases := []struct {
		name, readme string
		want         []walk
		err          string
	}{
		{
			name: "every kind",
			readme: "# x\n<!-- walkthrough a: background tcp://localhost:1 http://localhost:2/h -->\n```sh\nserve &\nserve2\n```\n" +
				"text\n<!-- walkthrough b -->\n```sh\nmake build   # note\n\n# a comment\nexport A=1 \\\n  B=2\n```\n" +
				"<!-- walkthrough a -->\n```console\n$ echo 1 \\\n  2\n1 2\n$ true\n$ printf 'x\\n\\n'\nx\n\n```\n```sh\nnot marked\n```\n",
			want: []walk{
				{name: "a", blocks: []block{
					{kind: background, line: 3, ready: []string{"tcp://localhost:1", "http://localhost:2/h"}, text: "serve &\nserve2\n"},
					{kind: console, line: 17, cmds: []command{
						{line: 18, cmd: "echo 1 \\\n  2", want: "1 2\n"},
						{line: 21, cmd: "true"},
						{line: 22, cmd: "printf 'x\\n\\n'", want: "x\n\n"},
					}},
				}},
				{name: "b", blocks: []block{
					{kind: commands, line: 9, cmds: []command{{line: 10, cmd: "make build   # note"}, {line: 13, cmd: "export A=1 \\\n  B=2"}}},
				}},
			},
		},
		{
			name:   "stop",
			readme: "<!-- walkthrough a: background tcp://localhost:1 -->\n```sh\nserve &\nserve2\n```\n<!-- walkthrough a: stop -->\n```sh\nkill %1\n```\n",
			want: []walk{{name: "a", blocks: []block{
				{kind: background, line: 2, ready: []string{"tcp://localhost:1"}, text: "serve &\nserve2\n"},
				{kind: interrupt, line: 7, text: "kill %1\n"},
			}}},
		},
		{name: "stop first", readme: "<!-- walkthrough a: stop -->\n```sh\nkill %1\n```\n", err: "a stop block with no background block before it"},
		{name: "stop console", readme: "<!-- walkthrough a: background tcp://x:1 -->\n```sh\nx\n```\n<!-- walkthrough a: stop -->\n```console\n$ kill %1\n```\n", err: "a stop block must be ```sh"},
		{name: "output first", readme: "<!-- walkthrough a -->\n```console\nhello\n$ true\n```\n", err: "README.md:2: walkthrough \"a\": line 3: output before the first \"$ \" command"},
		{name: "background console", readme: "<!-- walkthrough a: background tcp://x:1 -->\n```console\n$ true\n```\n", err: "must be ```sh"},
		{name: "bad target", readme: "<!-- walkthrough a: background localhost:1 -->\n```sh\nx\n```\n", err: "want http://… or tcp://host:port"},
		{name: "no block", readme: "<!-- walkthrough a -->\ntext\n", err: "no fenced block after the marker"},
		{name: "unclosed", readme: "<!-- walkthrough a -->\n```sh\nx\n", err: "not closed"},
		{name: "unreadable marker", readme: "<!-- walkthrough -->\n```sh\nx\n```\n", err: "a walkthrough marker this harness cannot read"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := parse(c.readme)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Errorf("parse() = %v, want an error saying %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("parse() = %v, want nil", err)
			}
			if !equalWalks(got, c.want) {
				t.Errorf("parse() = %+v, want %+v", got, c.want)
			}
		})
	}
}

// TestNormalize: trailing blanks, carriage returns and blank last lines do
// not count.
func TestNormalize(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"a  \r\nb\t\n\n\n", "a\nb"},
		{"", ""},
		{"\n \n", ""},
		{"  a", "  a"},
	} {
		if got := normalize(c.in); got != c.want {
			t.Errorf("normalize(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func equalWalks(a, b []walk) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].name != b[i].name || len(a[i].blocks) != len(b[i].blocks) {
			return false
		}
		for j := range a[i].blocks {
			x, y := a[i].blocks[j], b[i].blocks[j]
			if x.kind != y.kind || x.line != y.line || x.text != y.text || !slices.Equal(x.ready, y.ready) || !slices.Equal(x.cmds, y.cmds) {
				return false
			}
		}
	}
	return true
}

// TestRunnerReports: a block that disagrees with the README fails with the
// README line, the command, what it printed and what the README shows; the
// exports of one command reach the next.
func TestRunnerReports(t *testing.T) {
	r := &runner{t: t, root: t.TempDir(), ready: 2 * time.Second, wait: 2 * time.Second}
	r.state = filepath.Join(t.TempDir(), "env")
	if err := os.WriteFile(r.state, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.stop)
	cases := []struct {
		name string
		run  func() error
		want []string // in the error; none: no error
	}{
		{"export", func() error { return r.foreground(commands, command{line: 3, cmd: "export GREETING=hello"}) }, nil},
		{"plain assignment", func() error { return r.foreground(commands, command{line: 4, cmd: "D=dir"}) }, nil},
		{"carried over", func() error {
			return r.foreground(console, command{line: 5, cmd: "echo $GREETING $D", want: "hello dir  \n\n"})
		}, nil},
		{"other output", func() error {
			return r.foreground(console, command{line: 7, cmd: "echo 200; echo 200", want: "200\n429\n"})
		},
			[]string{"README.md:7: $ echo 200; echo 200", "exit: 0", "output:\n\t200\n\t200", "want (as the README shows):\n\t200\n\t429"}},
		{"stderr is not compared", func() error { return r.foreground(console, command{line: 8, cmd: "echo progress >&2"}) }, nil},
		{"output where none is shown", func() error { return r.foreground(console, command{line: 9, cmd: "echo oops; echo why >&2"}) },
			[]string{"README.md:9: $ echo oops; echo why >&2", "output:\n\toops", "want (as the README shows):\n\t(nothing)", "stderr (not compared):\n\twhy"}},
		{"exit status", func() error { return r.foreground(console, command{line: 11, cmd: "exit 3"}) },
			[]string{"README.md:11: $ exit 3", "exit: exit status 3"}},
		{"sh command fails", func() error { return r.foreground(commands, command{line: 13, cmd: "echo why; echo how >&2; false"}) },
			[]string{"README.md:13: echo why; echo how >&2; false", "failed: exit status 1", "output:\n\twhy", "stderr:\n\thow"}},
		{"background ready", func() error {
			return r.background(block{line: 15, ready: []string{"tcp://" + listenAddr(t)}, text: "sleep 600\n"}, false)
		}, nil},
		{"background ends first", func() error {
			return r.background(block{line: 17, ready: []string{"http://127.0.0.1:1/"}, text: "echo starting; exit 2\n"}, false)
		}, []string{"README.md:17: the background block ended (exit status 2) before http://127.0.0.1:1/ was ready", "\tstarting"}},
		{"background never ready", func() error {
			return r.background(block{line: 19, ready: []string{"tcp://127.0.0.1:1"}, text: "sleep 600\n"}, false)
		}, []string{"README.md:19: tcp://127.0.0.1:1 not ready within 2s"}},
		{"generated text", func() error {
			return r.foreground(console, command{line: 21, cmd: "echo namespace a id 3f9c2a71b04e", want: "namespace a id …\n"})
		}, nil},
		{"generated text elsewhere", func() error {
			return r.foreground(console, command{line: 22, cmd: "echo namespace b id 3f9c2a71b04e", want: "namespace a id …\n"})
		}, []string{"README.md:22: $ echo namespace b id", "want (as the README shows):\n\tnamespace a id …"}},
		{"Ctrl-C, then kill %1", func() error {
			if err := r.background(block{line: 23, ready: []string{"tcp://" + listenAddr(t)}, text: "sleep 600 &\nsleep 601\n"}, true); err != nil {
				return err
			}
			time.Sleep(300 * time.Millisecond) // until the shell runs its foreground command
			return r.interrupt(block{line: 26, text: "kill %1\n"})
		}, nil},
		{"a stop block that stops too little", func() error {
			if err := r.background(block{line: 28, ready: []string{"tcp://" + listenAddr(t)}, text: "sleep 600 &\nsleep 601\n"}, true); err != nil {
				return err
			}
			time.Sleep(300 * time.Millisecond) // until the shell runs its foreground command
			return r.interrupt(block{line: 31, text: "true\n"})
		}, []string{"README.md:31: the background block of README.md:28 still runs 2s after Ctrl-C and the stop block"}},
	}
	for _, c := range cases {
		err := c.run()
		if len(c.want) == 0 {
			if err != nil {
				t.Errorf("%s: %v, want nil", c.name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: nil, want an error", c.name)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error\n%v\nwant it to contain %q", c.name, err, w)
			}
		}
	}
}

// listenAddr returns the address of a listener open until the test ends.
func listenAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l.Addr().String()
}
