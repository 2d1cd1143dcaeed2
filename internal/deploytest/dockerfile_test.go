package deploytest

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/dynalimit/dynalimit/internal/testutil"
)

// instruction is one Dockerfile instruction, its continuation lines joined.
type instruction struct {
	line int    // where it starts, 1-based
	cmd  string // upper case: FROM, COPY, RUN...
	args string
}

// stage is one FROM and the instructions up to the next.
type stage struct {
	name, base string
	ins        []instruction
}

// parseDockerfile splits a Dockerfile into stages. Comment lines (parser
// directives included) are dropped, also between continuation lines.
func parseDockerfile(text string) ([]stage, error) {
	var stages []stage
	var cur *instruction
	add := func(in instruction) error {
		if in.cmd == "FROM" {
			f := strings.Fields(in.args)
			st := stage{}
			if len(f) > 0 {
				st.base = f[0]
			}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				st.name = f[2]
			} else if len(f) != 1 {
				return fmt.Errorf("line %d: FROM %s: want IMAGE [AS NAME]", in.line, in.args)
			}
			stages = append(stages, st)
			return nil
		}
		if len(stages) == 0 && in.cmd == "ARG" {
			return nil // an ARG for the FROM lines
		}
		if len(stages) == 0 {
			return fmt.Errorf("line %d: %s before the first FROM", in.line, in.cmd)
		}
		stages[len(stages)-1].ins = append(stages[len(stages)-1].ins, in)
		return nil
	}
	for i, raw := range strings.Split(text, "\n") {
		line := strings.TrimSpace(raw)
		if strings.HasPrefix(line, "#") || (line == "" && cur == nil) {
			continue
		}
		cont := strings.HasSuffix(line, `\`)
		line = strings.TrimSuffix(line, `\`)
		if cur == nil {
			cmd, args, _ := strings.Cut(line, " ")
			cur = &instruction{line: i + 1, cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args)}
		} else {
			cur.args = strings.TrimSpace(cur.args + " " + strings.TrimSpace(line))
		}
		if !cont {
			if err := add(*cur); err != nil {
				return nil, err
			}
			cur = nil
		}
	}
	if cur != nil {
		return nil, fmt.Errorf("line %d: the file ends in a continuation", cur.line)
	}
	if len(stages) == 0 {
		return nil, errors.New("no FROM")
	}
	return stages, nil
}

// shellWords splits a shell command into words: blanks separate, single and
// double quotes group, a backslash escapes the next character.
func shellWords(s string) ([]string, error) {
	var words []string
	var w strings.Builder
	inWord := false
	var quote rune
	esc := false
	for _, r := range s {
		switch {
		case esc:
			w.WriteRune(r)
			esc = false
		case r == '\\' && quote != '\'':
			esc, inWord = true, true
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				w.WriteRune(r)
			}
		case r == '"' || r == '\'':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		case strings.ContainsRune(";&|<>`$(", r):
			return nil, fmt.Errorf("%q: only plain commands are understood here, not shell syntax (%c)", s, r)
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 || esc {
		return nil, fmt.Errorf("%q: unterminated quote or escape", s)
	}
	if inWord {
		words = append(words, w.String())
	}
	return words, nil
}

// command is a RUN instruction read as one command: its environment
// assignments, then the program and its arguments.
type command struct {
	env  []string
	argv []string
}

// parseRun reads a RUN instruction's arguments: its --options (--mount)
// first, then KEY=value assignments and a command.
func parseRun(args string) (command, error) {
	words, err := shellWords(args)
	if err != nil {
		return command{}, err
	}
	var c command
	for len(words) > 0 && strings.HasPrefix(words[0], "--") {
		words = words[1:]
	}
	for len(words) > 0 && regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`).MatchString(words[0]) {
		c.env = append(c.env, words[0])
		words = words[1:]
	}
	if len(words) == 0 {
		return command{}, fmt.Errorf("RUN %s: no command", args)
	}
	c.argv = words
	return c, nil
}

// copyIns is a COPY (or ADD) instruction.
type copyIns struct {
	line int
	from string // --from stage, or "" for the build context
	srcs []string
	dst  string
}

func parseCopy(in instruction) (copyIns, error) {
	c := copyIns{line: in.line}
	var words []string
	if strings.HasPrefix(in.args, "[") {
		if err := json.Unmarshal([]byte(in.args), &words); err != nil {
			return c, fmt.Errorf("line %d: %s %s: %w", in.line, in.cmd, in.args, err)
		}
	} else {
		words = strings.Fields(in.args)
	}
	for len(words) > 0 && strings.HasPrefix(words[0], "--") {
		if v, ok := strings.CutPrefix(words[0], "--from="); ok {
			c.from = v
		}
		words = words[1:]
	}
	if len(words) < 2 {
		return c, fmt.Errorf("line %d: %s %s: want SRC... DEST", in.line, in.cmd, in.args)
	}
	c.srcs, c.dst = words[:len(words)-1], words[len(words)-1]
	return c, nil
}

// ignoreRule is one line of .dockerignore.
type ignoreRule struct {
	pattern string
	keep    bool // a "!" line
}

func parseDockerignore(text string) []ignoreRule {
	var rules []ignoreRule
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		r := ignoreRule{}
		if p, ok := strings.CutPrefix(line, "!"); ok {
			r.keep, line = true, strings.TrimSpace(p)
		}
		r.pattern = path.Clean(strings.TrimPrefix(line, "/"))
		rules = append(rules, r)
	}
	return rules
}

// excluded reports whether .dockerignore leaves rel (slash-separated,
// relative to the context) out of the build context: the last rule that
// matches it or one of its parent directories decides. Patterns are
// path.Match patterns; "**" is not used by this repository.
func excluded(rules []ignoreRule, rel string) bool {
	out := false
	for _, r := range rules {
		for p := rel; p != "." && p != "/"; p = path.Dir(p) {
			if ok, _ := path.Match(r.pattern, p); ok {
				out = !r.keep
				break
			}
		}
	}
	return out
}

// dockerfile is the parsed Dockerfile with what the checks look up.
type dockerfile struct {
	stages []stage
	// build is the stage that builds ./cmd/ratelimit, and buildRun its RUN.
	build    *stage
	buildRun command
}

func (d *dockerfile) stage(name string) *stage {
	for i := range d.stages {
		if d.stages[i].name == name {
			return &d.stages[i]
		}
	}
	return nil
}

// last returns the value of the stage's last instruction cmd, or "".
func (s *stage) last(cmd string) string {
	v := ""
	for _, in := range s.ins {
		if in.cmd == cmd {
			v = in.args
		}
	}
	return v
}

// env returns the stage's ENV assignments (KEY=value form).
func (s *stage) env() []string {
	var env []string
	for _, in := range s.ins {
		if in.cmd == "ENV" {
			env = append(env, strings.Fields(in.args)...)
		}
	}
	return env
}

// goBuild returns the RUN of st that runs `go build` for pkg.
func goBuild(st *stage, pkg string) (command, bool, error) {
	for _, in := range st.ins {
		if in.cmd != "RUN" || !strings.Contains(in.args, "go build") {
			continue
		}
		c, err := parseRun(in.args)
		if err != nil {
			return command{}, false, fmt.Errorf("line %d: %w", in.line, err)
		}
		if slices.Contains(c.argv, pkg) {
			return c, true, nil
		}
	}
	return command{}, false, nil
}

// flagValue returns the value of -name (as -name=v or -name v) in argv.
func flagValue(argv []string, name string) (string, bool) {
	for i, a := range argv {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v, true
		}
		if a == name && i+1 < len(argv) {
			return argv[i+1], true
		}
	}
	return "", false
}

// envValue returns the last value of key in env (KEY=value entries).
func envValue(env []string, key string) (string, bool) {
	v, found := "", false
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == key {
			v, found = val, true
		}
	}
	return v, found
}

// checkDockerfile returns every way text falls short of what the image
// promises, with root the repository (go.mod, the COPY sources) and ignore
// the text of .dockerignore.
func checkDockerfile(root, text, ignore string) (*dockerfile, []error) {
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	stages, err := parseDockerfile(text)
	if err != nil {
		return nil, []error{err}
	}
	d := &dockerfile{stages: stages}

	// The builder: golang at go.mod's exact version.
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return nil, []error{err}
	}
	m := regexp.MustCompile(`(?m)^go (\d+\.\d+\.\d+)$`).FindSubmatch(gomod)
	if m == nil {
		return nil, []error{errors.New("go.mod: no go directive with a patch version")}
	}
	goVersion := string(m[1])
	pinned := regexp.MustCompile(`^[a-z0-9./_-]+:[A-Za-z0-9._-]+$`)
	for i, st := range stages {
		if st.base == "scratch" || d.stage(st.base) != nil {
			continue
		}
		if !pinned.MatchString(st.base) || strings.HasSuffix(st.base, ":latest") {
			fail("stage %d: FROM %s: want an image with an exact tag", i+1, st.base)
		}
	}

	for i := range stages {
		c, ok, err := goBuild(&stages[i], "./cmd/ratelimit")
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			if d.build != nil {
				fail("./cmd/ratelimit is built in two stages")
			}
			d.build, d.buildRun = &stages[i], c
		}
	}
	if d.build == nil {
		fail("no RUN builds ./cmd/ratelimit with go build")
		return d, errs
	}
	if want := "golang:" + goVersion + "-"; !strings.HasPrefix(d.build.base, want) {
		fail("the builder is FROM %s, want %s<debian release> (go.mod says go %s)", d.build.base, want, goVersion)
	}
	if d.build.name == "" {
		fail("the builder stage has no name for COPY --from")
	}
	c := d.buildRun
	if v, _ := envValue(append(d.build.env(), c.env...), "CGO_ENABLED"); v != "0" {
		fail("the ratelimit build runs with CGO_ENABLED=%q, want 0 (a static binary for a scratch image)", v)
	}
	if !slices.Contains(c.argv, "-trimpath") {
		fail("the ratelimit build has no -trimpath")
	}
	if v, _ := flagValue(c.argv, "-ldflags"); !slices.Contains(strings.Fields(v), "-s") || !slices.Contains(strings.Fields(v), "-w") {
		fail("the ratelimit build's -ldflags are %q, want -s -w", v)
	}
	out, ok := flagValue(c.argv, "-o")
	if !ok || !path.IsAbs(out) {
		fail("the ratelimit build writes %q, want an absolute -o path", out)
	}

	// Every COPY: sources in the context, or an earlier stage.
	rules := parseDockerignore(ignore)
	for i, st := range stages {
		for _, in := range st.ins {
			if in.cmd == "ADD" {
				fail("line %d: ADD, want COPY (no remote or archive sources)", in.line)
			}
			if in.cmd != "COPY" && in.cmd != "ADD" {
				continue
			}
			cp, err := parseCopy(in)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if cp.from != "" {
				j := slices.IndexFunc(stages[:i], func(s stage) bool { return s.name == cp.from })
				if j < 0 {
					fail("line %d: COPY --from=%s: no earlier stage of that name", in.line, cp.from)
				}
				continue
			}
			for _, src := range cp.srcs {
				rel := path.Clean(src)
				if strings.ContainsAny(rel, "*?[") || rel == "." || strings.HasPrefix(rel, "..") || path.IsAbs(rel) {
					fail("line %d: COPY %s: want a plain path inside the repository", in.line, src)
					continue
				}
				if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(rel))); err != nil {
					fail("line %d: COPY %s: %s does not exist in the repository", in.line, src, rel)
					continue
				}
				if excluded(rules, rel) {
					fail("line %d: COPY %s: .dockerignore leaves %s out of the build context", in.line, src, rel)
				}
			}
		}
	}

	// The final stage: what envoyproxy/ratelimit's users swap in.
	final := &stages[len(stages)-1]
	if final.base != "scratch" && !strings.HasPrefix(final.base, "gcr.io/distroless/static") {
		fail("the final stage is FROM %s, want scratch or distroless static", final.base)
	}
	if u := final.last("USER"); u != "65534:65534" {
		fail("the final stage's USER is %q, want 65534:65534 (as Envoy Gateway runs envoyproxy/ratelimit)", u)
	}
	var entry []string
	if e := final.last("ENTRYPOINT"); json.Unmarshal([]byte(e), &entry) != nil || !slices.Equal(entry, []string{"/bin/ratelimit"}) {
		fail(`the final stage's ENTRYPOINT is %q, want ["/bin/ratelimit"] (exec form, as in envoyproxy/ratelimit's image)`, e)
	}
	if cmd := final.last("CMD"); cmd != "" {
		fail("the final stage has CMD %s, want none: with no arguments the binary serves", cmd)
	}
	var exposed []string
	for _, in := range final.ins {
		if in.cmd == "EXPOSE" {
			exposed = append(exposed, strings.Fields(in.args)...)
		}
	}
	for _, p := range []string{"8080", "8081", "6070"} {
		if !slices.Contains(exposed, p) && !slices.Contains(exposed, p+"/tcp") {
			fail("the final stage does not EXPOSE %s", p)
		}
	}
	var binary, certs bool
	for _, in := range final.ins {
		if in.cmd != "COPY" {
			continue
		}
		cp, err := parseCopy(in)
		if err != nil || d.build == nil || cp.from != d.build.name {
			continue
		}
		if slices.Equal(cp.srcs, []string{out}) && cp.dst == "/bin/ratelimit" {
			binary = true
		}
		if slices.Equal(cp.srcs, []string{"/etc/ssl/certs/ca-certificates.crt"}) && cp.dst == "/etc/ssl/certs/ca-certificates.crt" {
			certs = true
		}
	}
	if !binary {
		fail("the final stage does not COPY --from=%s %s /bin/ratelimit (the build's output)", d.build.name, out)
	}
	if !certs {
		fail("the final stage does not COPY the builder's /etc/ssl/certs/ca-certificates.crt (the AWS SDK needs HTTPS)")
	}

	// The upstream target of docker-compose.yml.
	up := d.stage("upstream")
	if up == nil {
		fail("no stage named upstream (docker-compose.yml builds it)")
	} else {
		if _, ok, _ := goBuild(d.build, "./examples/upstream"); !ok {
			fail("the builder does not build ./examples/upstream")
		}
		var e []string
		if json.Unmarshal([]byte(up.last("ENTRYPOINT")), &e) != nil || len(e) != 1 {
			fail("the upstream stage's ENTRYPOINT is %q, want the exec form of one binary", up.last("ENTRYPOINT"))
		}
		if u := up.last("USER"); u != "65534:65534" {
			fail("the upstream stage's USER is %q, want 65534:65534", u)
		}
	}
	return d, errs
}

// readRepoFile returns a file of the repository.
func readRepoFile(t *testing.T, rel string) string {
	t.Helper()
	root := testutil.RepoRoot(t)
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestDockerfile checks the repository's Dockerfile, then copies of it
// broken on purpose, each of which the checks must refuse.
func TestDockerfile(t *testing.T) {
	root := testutil.RepoRoot(t)
	text := readRepoFile(t, "Dockerfile")
	ignore := readRepoFile(t, ".dockerignore")
	if _, errs := checkDockerfile(root, text, ignore); len(errs) > 0 {
		t.Fatalf("Dockerfile: %v", errors.Join(errs...))
	}

	// replace returns a mutation replacing old (which must be in the file)
	// with new.
	replace := func(old, new string) func(string) string {
		return func(s string) string {
			if !strings.Contains(s, old) {
				t.Fatalf("the Dockerfile has no %q to break", old)
			}
			return strings.Replace(s, old, new, 1)
		}
	}
	cases := []struct {
		name   string
		mutate func(string) string
		ignore string // replaces .dockerignore when set
		want   string // in one of the errors
	}{
		{name: "COPY of a missing directory", mutate: replace("COPY pkg ./pkg", "COPY pkgs ./pkg"), want: "pkgs does not exist"},
		{name: "COPY of a missing file", mutate: replace("COPY go.mod go.sum ./", "COPY go.mod go.sum go.work ./"), want: "go.work does not exist"},
		{name: "COPY of a file .dockerignore leaves out", mutate: replace("COPY pkg ./pkg", "COPY pkg ./pkg\nCOPY docs ./docs"), want: ".dockerignore leaves docs out"},
		{name: ".dockerignore leaves out a copied directory", mutate: func(s string) string { return s }, ignore: "*\n!go.mod\n!go.sum\n!cmd\n!internal\n!examples/upstream\n", want: ".dockerignore leaves pkg out"},
		{name: "COPY from a stage that does not exist", mutate: replace("--from=build /out/ratelimit", "--from=builder /out/ratelimit"), want: "no earlier stage"},
		{name: "the binary copied from another path", mutate: replace("COPY --from=build /out/ratelimit /bin/ratelimit", "COPY --from=build /out/ratelimit.old /bin/ratelimit"), want: "does not COPY --from=build /out/ratelimit /bin/ratelimit"},
		{name: "USER root", mutate: replace("USER 65534:65534\nEXPOSE 8080", "USER 0:0\nEXPOSE 8080"), want: `USER is "0:0"`},
		{name: "no USER", mutate: replace("USER 65534:65534\nEXPOSE 8080", "EXPOSE 8080"), want: `USER is ""`},
		{name: "ENTRYPOINT in shell form", mutate: replace(`ENTRYPOINT ["/bin/ratelimit"]`, `ENTRYPOINT /bin/ratelimit`), want: "ENTRYPOINT is"},
		{name: "ENTRYPOINT elsewhere", mutate: replace(`ENTRYPOINT ["/bin/ratelimit"]`, `ENTRYPOINT ["/usr/local/bin/ratelimit"]`), want: "ENTRYPOINT is"},
		{name: "a CMD on the service", mutate: replace(`ENTRYPOINT ["/bin/ratelimit"]`, `ENTRYPOINT ["/bin/ratelimit"]`+"\nCMD [\"serve\"]"), want: "want none"},
		{name: "a port not exposed", mutate: replace("EXPOSE 8080 8081 6070", "EXPOSE 8080 8081"), want: "does not EXPOSE 6070"},
		{name: "cgo on", mutate: replace("CGO_ENABLED=0 go build -trimpath -ldflags=\"-s -w\" -o /out/ratelimit", "CGO_ENABLED=1 go build -trimpath -ldflags=\"-s -w\" -o /out/ratelimit"), want: `CGO_ENABLED="1"`},
		{name: "no -trimpath", mutate: replace("go build -trimpath -ldflags=\"-s -w\" -o /out/ratelimit", "go build -ldflags=\"-s -w\" -o /out/ratelimit"), want: "no -trimpath"},
		{name: "symbols kept", mutate: replace(`-ldflags="-s -w" -o /out/ratelimit`, `-ldflags="-s" -o /out/ratelimit`), want: "want -s -w"},
		{name: "ratelimit not built", mutate: replace("./cmd/ratelimit\n", "./cmd/other\n"), want: "no RUN builds ./cmd/ratelimit"},
		{name: "builder without a patch version", mutate: replace("golang:1.26.8-bookworm", "golang:1.26-bookworm"), want: "go.mod says"},
		{name: "builder on latest", mutate: replace("golang:1.26.8-bookworm", "golang:latest"), want: "exact tag"},
		{name: "final stage with a shell", mutate: replace("FROM scratch AS ratelimit", "FROM debian:bookworm-slim AS ratelimit"), want: "want scratch"},
		{name: "no CA certificates", mutate: replace("COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt\n", ""), want: "ca-certificates.crt"},
		{name: "no upstream target", mutate: replace("FROM scratch AS upstream", "FROM scratch AS app"), want: "no stage named upstream"},
		{name: "an instruction before FROM", mutate: func(s string) string { return "ARG X\nRUN true\n" + s }, want: "before the first FROM"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ign := ignore
			if tc.ignore != "" {
				ign = tc.ignore
			}
			_, errs := checkDockerfile(root, tc.mutate(text), ign)
			if len(errs) == 0 {
				t.Fatalf("the broken Dockerfile passed, want an error containing %q", tc.want)
			}
			if !strings.Contains(errors.Join(errs...).Error(), tc.want) {
				t.Fatalf("errors %v, want one containing %q", errors.Join(errs...), tc.want)
			}
		})
	}
}

func TestShellWords(t *testing.T) {
	cases := []struct {
		in   string
		want []string
		bad  bool
	}{
		{in: `go build -ldflags="-s -w" -o /out/x ./cmd/x`, want: []string{"go", "build", "-ldflags=-s -w", "-o", "/out/x", "./cmd/x"}},
		{in: `a 'b c' "d\"e" f\ g`, want: []string{"a", "b c", `d"e`, "f g"}},
		{in: `a && b`, bad: true},
		{in: `a "b`, bad: true},
	}
	for _, tc := range cases {
		got, err := shellWords(tc.in)
		if (err != nil) != tc.bad || (!tc.bad && !slices.Equal(got, tc.want)) {
			t.Errorf("shellWords(%q) = %q, %v; want %q, error %v", tc.in, got, err, tc.want, tc.bad)
		}
	}
}

func TestExcluded(t *testing.T) {
	rules := parseDockerignore("# c\n*\n!go.mod\n!cmd\n!examples/upstream\nexamples/upstream/secret\n")
	for rel, want := range map[string]bool{
		"go.mod": false, "go.sum": true, "cmd": false, "cmd/ratelimit/main.go": false,
		"examples": true, "examples/upstream/main.go": false, "examples/upstream/secret": true,
		"examples/envoy/envoy.yaml": true, "docs/settings.md": true,
	} {
		if got := excluded(rules, rel); got != want {
			t.Errorf("excluded(%s) = %v, want %v", rel, got, want)
		}
	}
}
