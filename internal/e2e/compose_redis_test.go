package e2e

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/types"

	"github.com/dynalimit/dynalimit/internal/lease"
	"github.com/dynalimit/dynalimit/internal/testutil"
)

// The redis profile of docker-compose.yml: Redis and two replicas of the
// service on it.
const (
	redisProfile = "redis"
	redisService = "redis"
	// redisPort is Redis's port in its container.
	redisPort = "6379"
)

// redisReplicas are the replicas of the redis profile.
var redisReplicas = []string{"ratelimit-redis-1", "ratelimit-redis-2"}

// redisComposeSettings are the envoyproxy/ratelimit Redis settings (read
// by the binary under these names with BACKEND_TYPE=redis) the profile may
// set; other names must be settings of docs/settings.md.
var redisComposeSettings = []string{"REDIS_URL", "REDIS_TYPE", "REDIS_SOCKET_TYPE", "REDIS_TIMEOUT", "REDIS_POOL_SIZE"}

// TestComposeRedisProfile checks docker-compose.yml's redis profile as
// compose-go loads it: off by default, then Redis pinned and healthy before
// two replicas of the service that share it under their own ports.
func TestComposeRedisProfile(t *testing.T) {
	t.Parallel()
	root := testutil.RepoRoot(t)
	if errs := checkComposeRedisText(t, root, readFile(t, root, composeFile)); len(errs) > 0 {
		t.Fatalf("%s: %v", composeFile, errors.Join(errs...))
	}
}

// TestComposeRedisProfileBroken runs TestComposeRedisProfile's checks over
// copies of docker-compose.yml broken on purpose, each of which must be
// refused.
func TestComposeRedisProfileBroken(t *testing.T) {
	t.Parallel()
	root := testutil.RepoRoot(t)
	text := readFile(t, root, composeFile)
	cases := []struct{ name, old, new, want string }{
		{"redis on latest", "image: redis:7.0.15-alpine", "image: redis:latest", "redis: image"},
		{"redis without profile", "    image: redis:7.0.15-alpine\n    profiles: [redis]\n", "    image: redis:7.0.15-alpine\n", "without the profile"},
		// compose itself refuses replicas that start without the Redis they need.
		{"replicas without profile", "  profiles: [redis]\n  image: dynalimit:dev", "  image: dynalimit:dev", `depends on undefined service "redis"`},
		{"another Redis", "REDIS_URL: redis:6379", "REDIS_URL: cache:6379", "REDIS_URL"},
		{"not the redis store", "BACKEND_TYPE: redis", "BACKEND_TYPE: memory", "BACKEND_TYPE"},
		{"a fleet of three", `FLEET_SIZE: "2"`, `FLEET_SIZE: "3"`, "FLEET_SIZE"},
		{"a setting misspelt", "REDIS_URL: redis:6379", "REDIS_URL: redis:6379\n    REDIS_URI: redis:6379", "REDIS_URI"},
		{"a port of the DynamoDB stack", `"127.0.0.1:28080:8080"`, `"127.0.0.1:8080:8080"`, "published twice"},
		{"replicas on one port", `"127.0.0.1:28081:8081"`, `"127.0.0.1:18081:8081"`, "published twice"},
		{"before Redis answers", "      condition: service_healthy\n  restart: on-failure", "      condition: service_started\n  restart: on-failure", "depends_on"},
		{"no healthcheck", `      test: ["CMD", "redis-cli", "ping"]`, `      test: ["NONE"]`, "healthcheck"},
		{"a writable mount", "      target: /etc/dynalimit/config\n      read_only: true\n  depends_on", "      target: /etc/dynalimit/config\n  depends_on", "writable"},
		{"no image built", "    build:\n      context: .\n      dockerfile: Dockerfile\n      target: ratelimit\n    ports:\n      - \"127.0.0.1:18080", "    ports:\n      - \"127.0.0.1:18080", "builds dynalimit:dev"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(text, tc.old) {
				t.Fatalf("%s has no %q to break", composeFile, tc.old)
			}
			errs := checkComposeRedisText(t, root, strings.Replace(text, tc.old, tc.new, 1))
			if len(errs) == 0 || !strings.Contains(errors.Join(errs...).Error(), tc.want) {
				t.Fatalf("errors %v, want one containing %q", errors.Join(errs...), tc.want)
			}
		})
	}
}

// checkComposeRedisText loads text without and with the redis profile and
// returns every way it falls short of the profile's promises.
func checkComposeRedisText(t *testing.T, root, text string) []error {
	t.Helper()
	plain, err := parseCompose(root, []byte(text))
	if err != nil {
		return []error{err}
	}
	var errs []error
	for _, name := range append([]string{redisService}, redisReplicas...) {
		if _, on := plain.Services[name]; on {
			errs = append(errs, fmt.Errorf("%s runs without the profile %s: docker compose up would start it", name, redisProfile))
		}
	}
	p, err := parseCompose(root, []byte(text), redisProfile)
	if err != nil {
		return append(errs, err)
	}
	return append(errs, checkComposeRedis(t, p, root)...)
}

// checkComposeRedis returns every way the redis profile of a project
// loaded with it falls short.
func checkComposeRedis(t *testing.T, p *types.Project, root string) []error {
	t.Helper()
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	for _, name := range append([]string{redisService}, redisReplicas...) {
		s, ok := p.Services[name]
		if !ok {
			return []error{fmt.Errorf("no service %s with the profile %s", name, redisProfile)}
		}
		if !slices.Equal(s.Profiles, []string{redisProfile}) {
			fail("%s: profiles %v, want [%s]", name, s.Profiles, redisProfile)
		}
	}
	checkRedisService(fail, p.Services[redisService])
	var env0 map[string]string
	for i, name := range redisReplicas {
		env := checkRedisReplica(t, fail, p, root, name)
		if i == 0 {
			env0 = env
		} else if !maps.Equal(env, env0) {
			fail("%s: environment %v, %s has %v: want the same", name, env, redisReplicas[0], env0)
		}
	}
	built := 0
	for _, name := range redisReplicas {
		if b := p.Services[name].Build; b != nil {
			built++
			df := b.Context + "/" + b.Dockerfile
			if inRepo(fail, root, b.Context, name+": build context") != "" && !slices.Contains(dockerfileTargets(t, df), b.Target) || b.Target != "ratelimit" {
				fail("%s: build target %q, want the stage ratelimit of %s", name, b.Target, b.Dockerfile)
			}
		}
	}
	if built != 1 {
		fail("%d of the replicas on Redis build; want one that builds dynalimit:dev for both", built)
	}
	// Every published port once, with the DynamoDB stack running too.
	seen := map[string]string{}
	for _, s := range p.Services {
		for _, pc := range s.Ports {
			if other, dup := seen[pc.Published]; dup {
				fail("host port %s is published twice, by %s and %s", pc.Published, other, s.Name)
			}
			seen[pc.Published] = s.Name
		}
	}
	return errs
}

// checkRedisService checks the Redis container: an image pinned to a
// release, in memory, healthy once redis-cli ping answers.
func checkRedisService(fail func(string, ...any), s types.ServiceConfig) {
	if !regexp.MustCompile(`^redis:\d+\.\d+\.\d+(-alpine)?$`).MatchString(s.Image) || s.Build != nil {
		fail("redis: image %q (build %v), want redis:X.Y.Z, pulled", s.Image, s.Build)
	}
	if len(s.Command) == 0 || s.Command[0] != "redis-server" {
		fail("redis: command %q, want redis-server", s.Command)
	}
	if hc := s.HealthCheck; hc == nil || !slices.Equal(hc.Test, []string{"CMD", "redis-cli", "ping"}) {
		fail("redis: healthcheck %+v, want redis-cli ping, which the replicas wait for", hc)
	}
	var ports []string
	for _, pc := range s.Ports {
		ports = append(ports, fmt.Sprintf("%s:%s:%d", pc.HostIP, pc.Published, pc.Target))
	}
	if want := []string{"127.0.0.1:" + redisPort + ":" + redisPort}; !slices.Equal(ports, want) {
		fail("redis: ports %v, want %v", ports, want)
	}
}

// checkRedisReplica checks one replica on Redis and returns its
// environment.
func checkRedisReplica(t *testing.T, fail func(string, ...any), p *types.Project, root, name string) map[string]string {
	t.Helper()
	s := p.Services[name]
	if s.Image != "dynalimit:dev" {
		fail("%s: image %q, want dynalimit:dev", name, s.Image)
	}
	if rl := p.Services["ratelimit"]; !slices.Equal(s.Command, rl.Command) {
		fail("%s: command %q, want the ratelimit service's %q", name, s.Command, rl.Command)
	}
	if rel, ok := hostPath(s, root, flagArg(s.Command, "-config_dir")); !ok || rel != configDir {
		fail("%s: -config_dir is %q in the repository, want %s", name, rel, configDir)
	}
	for _, v := range s.Volumes {
		if v.Type != types.VolumeTypeBind || !v.ReadOnly {
			fail("%s: volume %s (%s) is writable or not a bind, want read_only binds of repository files", name, v.Target, v.Type)
		}
		inRepo(fail, root, v.Source, name+": bind mount")
	}
	got := map[string]string{}
	for d, c := range s.DependsOn {
		got[d] = c.Condition
	}
	if want := map[string]string{redisService: types.ServiceConditionHealthy}; !maps.Equal(got, want) {
		fail("%s: depends_on %v, want %v", name, got, want)
	}
	if s.Restart != types.RestartPolicyOnFailure {
		fail("%s: restart %q, want on-failure", name, s.Restart)
	}
	var ports []string
	for _, pc := range s.Ports {
		if pc.HostIP != "127.0.0.1" {
			fail("%s: port %s published on %q, want the loopback", name, pc.Published, pc.HostIP)
		}
		ports = append(ports, fmt.Sprint(pc.Target))
	}
	if want := []string{"8080", "8081", "6070"}; !slices.Equal(ports, want) {
		fail("%s: container ports %v, want %v (the binary's defaults)", name, ports, want)
	}
	env := composeEnv(s)
	checkRedisEnv(t, fail, root, name, env)
	return env
}

// checkRedisEnv checks a replica's environment: the Redis store on the
// redis service, a fleet of the replicas, a demo lease key, and only
// settings the binary reads.
func checkRedisEnv(t *testing.T, fail func(string, ...any), root, name string, env map[string]string) {
	t.Helper()
	want := map[string]string{
		"BACKEND_TYPE": "redis", "FLEET_SIZE": fmt.Sprint(len(redisReplicas)), "LIMIT_RESPONSE_HEADERS_ENABLED": "true",
	}
	for k, v := range want {
		if env[k] != v {
			fail("%s: %s=%q, want %q", name, k, env[k], v)
		}
	}
	if host, port, err := net.SplitHostPort(env["REDIS_URL"]); err != nil || host != redisService || port != redisPort {
		fail("%s: REDIS_URL %q, want the redis service's %s:%s", name, env["REDIS_URL"], redisService, redisPort)
	}
	if k := env["LEASE_SIGNING_KEY"]; !strings.Contains(k, "demo") {
		fail("%s: LEASE_SIGNING_KEY %q, want a key that says it is a demo's", name, k)
	} else if err := lease.CheckSettings(k, nil, ""); err != nil {
		fail("%s: LEASE_SIGNING_KEY: %v", name, err)
	}
	settings := readFile(t, root, "docs/settings.md")
	for k := range env {
		if strings.HasPrefix(k, "REDIS_") {
			if !slices.Contains(redisComposeSettings, k) {
				fail("%s: environment %s is not one of the Redis settings %v", name, k, redisComposeSettings)
			}
		} else if !strings.Contains(settings, "| `"+k+"` |") {
			fail("%s: environment %s is not a setting of docs/settings.md", name, k)
		}
	}
}
