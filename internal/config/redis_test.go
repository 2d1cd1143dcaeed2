package config

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/internal/redisclient"
)

// TestRedisSettingsFromEnv: every REDIS_* setting lands in RedisOptions,
// enumerated values in any case.
func TestRedisSettingsFromEnv(t *testing.T) {
	s, err := FromEnv(env(map[string]string{
		"BACKEND_TYPE": "redis", "REDIS_SOCKET_TYPE": "TCP", "REDIS_TYPE": "SENTINEL",
		"REDIS_URL": "mymaster,s1:26379,s2:26379", "REDIS_AUTH": "alice:pw", "REDIS_SENTINEL_AUTH": "spw",
		"REDIS_TLS": "true", "REDIS_TLS_CACERT": "/ca.pem", "REDIS_TLS_CLIENT_CERT": "/c.pem", "REDIS_TLS_CLIENT_KEY": "/k.pem",
		"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION": "true", "REDIS_POOL_SIZE": "20", "REDIS_PIPELINE_WINDOW": "150us",
		"REDIS_TIMEOUT": "250ms", "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION": "true", "REDIS_POOL_ON_EMPTY_BEHAVIOR": "WAIT",
		"REDIS_STARTUP_INITIAL_INTERVAL": "2s", "REDIS_STARTUP_MAX_INTERVAL": "1m", "REDIS_STARTUP_MAX_ELAPSED_TIME": "5m",
		"REDIS_PERSECOND": "true", "REDIS_PERSECOND_SOCKET_TYPE": "unix", "REDIS_PERSECOND_TYPE": "single",
		"REDIS_PERSECOND_URL": "/run/ps.sock", "REDIS_PERSECOND_AUTH": "pspw", "REDIS_PERSECOND_SENTINEL_AUTH": "x",
		"REDIS_PERSECOND_TLS": "false", "REDIS_PERSECOND_POOL_SIZE": "3", "REDIS_PERSECOND_PIPELINE_WINDOW": "1ms",
		"REDIS_PERSECOND_TIMEOUT": "2s", "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR": "wait",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(); err != nil {
		t.Fatalf("Validate() = %v", err)
	}
	if s.BackendType != BackendRedis || s.BackendInferred || !s.RedisHealthCheckActiveConnection {
		t.Errorf("BackendType, BackendInferred, RedisHealthCheckActiveConnection = %q, %v, %v", s.BackendType, s.BackendInferred, s.RedisHealthCheckActiveConnection)
	}
	o := s.RedisOptions()
	wantMain := redisclient.Target{Setting: "REDIS", SocketType: "tcp", Type: "sentinel", URL: "mymaster,s1:26379,s2:26379",
		Auth: "alice:pw", SentinelAuth: "spw", TLS: true, PoolSize: 20, PipelineWindow: 150 * time.Microsecond, Timeout: 250 * time.Millisecond}
	if o.Main != wantMain {
		t.Errorf("Main = %#v, want %#v", o.Main, wantMain)
	}
	wantPS := redisclient.Target{Setting: "REDIS_PERSECOND", SocketType: "unix", Type: "single", URL: "/run/ps.sock",
		Auth: "pspw", SentinelAuth: "x", PoolSize: 3, PipelineWindow: time.Millisecond, Timeout: 2 * time.Second}
	if o.PerSecond == nil || *o.PerSecond != wantPS {
		t.Errorf("PerSecond = %#v, want %#v", o.PerSecond, wantPS)
	}
	wantTLS := redisclient.TLSFiles{CACert: "/ca.pem", ClientCert: "/c.pem", ClientKey: "/k.pem", SkipHostnameVerification: true}
	if o.TLS != wantTLS {
		t.Errorf("TLS = %+v, want %+v", o.TLS, wantTLS)
	}
	if want := (redisclient.Startup{Initial: 2 * time.Second, Max: time.Minute, MaxElapsed: 5 * time.Minute}); o.Startup != want {
		t.Errorf("Startup = %+v, want %+v", o.Startup, want)
	}
}

func TestRedisDefaults(t *testing.T) {
	o := Defaults().RedisOptions()
	want := redisclient.Target{Setting: "REDIS", SocketType: "tcp", Type: "single", PoolSize: 10, Timeout: time.Second}
	if o.Main != want || o.PerSecond != nil {
		t.Errorf("RedisOptions() of the defaults = %#v, %v; want %#v and no per-second target", o.Main, o.PerSecond, want)
	}
	if want := (redisclient.Startup{Initial: time.Second, Max: 30 * time.Second}); o.Startup != want {
		t.Errorf("Startup = %+v, want %+v", o.Startup, want)
	}
}

// TestBackendInference: Envoy Gateway's environment (REDIS_URL, no
// BACKEND_TYPE) selects Redis and says it was inferred; BACKEND_TYPE, in
// the environment or as a flag, decides otherwise.
func TestBackendInference(t *testing.T) {
	tests := []struct {
		name         string
		env          map[string]string
		wantBackend  string
		wantInferred bool
	}{
		{"nothing", map[string]string{}, BackendMemory, false},
		{"envoy gateway", map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis.envoy-gateway-system.svc.cluster.local:6379"}, BackendRedis, true},
		{"socket type alone", map[string]string{"REDIS_SOCKET_TYPE": "tcp"}, BackendMemory, false},
		{"explicit redis", map[string]string{"BACKEND_TYPE": "Redis", "REDIS_URL": "r:6379"}, BackendRedis, false},
		{"explicit memory", map[string]string{"BACKEND_TYPE": "memory", "REDIS_URL": "r:6379"}, BackendMemory, false},
		{"explicit dynamodb", map[string]string{"BACKEND_TYPE": "dynamodb", "REDIS_URL": "r:6379"}, BackendDynamoDB, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := FromEnv(env(tt.env))
			if err != nil {
				t.Fatal(err)
			}
			if s.BackendType != tt.wantBackend || s.BackendInferred != tt.wantInferred {
				t.Errorf("BackendType, BackendInferred = %q, %v; want %q, %v", s.BackendType, s.BackendInferred, tt.wantBackend, tt.wantInferred)
			}
			if err := s.Validate(); err != nil {
				t.Errorf("Validate() = %v", err)
			}
		})
	}
	s, err := FromEnv(env(map[string]string{"REDIS_URL": "r:6379"}))
	if err != nil {
		t.Fatal(err)
	}
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	s.RegisterFlags(fs)
	if err := fs.Parse([]string{"-backend_type=memory"}); err != nil {
		t.Fatal(err)
	}
	if s.BackendType != BackendMemory || s.BackendInferred {
		t.Errorf("after -backend_type=memory: %q, inferred %v; want memory, not inferred", s.BackendType, s.BackendInferred)
	}
}

// TestRedisParseErrorsOnlyOnRedis: a REDIS_* value that does not parse is
// an error naming it on Redis, and ignored beside another store.
func TestRedisParseErrorsOnlyOnRedis(t *testing.T) {
	for _, bad := range []struct{ name, value string }{
		{"REDIS_POOL_SIZE", "many"}, {"REDIS_TYPE", "ring"}, {"REDIS_SOCKET_TYPE", "udp"}, {"REDIS_TLS", "sure"},
		{"REDIS_TIMEOUT", "5"}, {"REDIS_PERSECOND", "yes please"}, {"REDIS_POOL_ON_EMPTY_BEHAVIOR", "panic"},
	} {
		_, err := FromEnv(env(map[string]string{"REDIS_URL": "r:6379", bad.name: bad.value}))
		if err == nil || !strings.Contains(err.Error(), bad.name+"=") {
			t.Errorf("FromEnv(REDIS_URL, %s=%s) = %v, want an error naming it", bad.name, bad.value, err)
		}
		s, err := FromEnv(env(map[string]string{"BACKEND_TYPE": "memory", "REDIS_URL": "r:6379", bad.name: bad.value}))
		if err != nil {
			t.Errorf("FromEnv(BACKEND_TYPE=memory, %s=%s) = %v, want it ignored", bad.name, bad.value, err)
		} else if err := s.Validate(); err != nil {
			t.Errorf("Validate(BACKEND_TYPE=memory, %s=%s) = %v, want it ignored", bad.name, bad.value, err)
		}
	}
}

// TestValidateRedis: each wrong combination is refused naming the setting,
// only when the store is Redis.
func TestValidateRedis(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"no URL", map[string]string{"BACKEND_TYPE": "redis"}, "REDIS_URL is empty"},
		{"no port", map[string]string{"REDIS_URL": "redis"}, "REDIS_URL=\"redis\""},
		{"password not printed", map[string]string{"REDIS_URL": "redis://u:topsecret@h:1?x=1"}, "REDIS_URL=\"redis://u:***@h:1?x=1\""},
		{"two on single", map[string]string{"REDIS_URL": "a:1,b:2"}, "REDIS_TYPE=cluster"},
		{"sentinel without master", map[string]string{"REDIS_TYPE": "sentinel", "REDIS_URL": "s1:26379,s2:26379"}, "REDIS_URL="},
		{"unix cluster", map[string]string{"REDIS_TYPE": "cluster", "REDIS_SOCKET_TYPE": "unix", "REDIS_URL": "/s"}, "REDIS_SOCKET_TYPE=unix"},
		{"auth twice", map[string]string{"REDIS_URL": "redis://:pw@h:1", "REDIS_AUTH": "pw"}, "REDIS_AUTH"},
		{"pool size", map[string]string{"REDIS_URL": "h:1", "REDIS_POOL_SIZE": "0"}, "REDIS_POOL_SIZE=0"},
		{"timeout", map[string]string{"REDIS_URL": "h:1", "REDIS_TIMEOUT": "0s"}, "REDIS_TIMEOUT=0s"},
		{"window", map[string]string{"REDIS_URL": "h:1", "REDIS_PIPELINE_WINDOW": "-1ms"}, "REDIS_PIPELINE_WINDOW="},
		{"create", map[string]string{"REDIS_URL": "h:1", "REDIS_POOL_ON_EMPTY_BEHAVIOR": "CREATE"}, "REDIS_POOL_ON_EMPTY_BEHAVIOR=CREATE"},
		{"error", map[string]string{"REDIS_URL": "h:1", "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR": "error"}, "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR=ERROR"},
		{"CA without TLS", map[string]string{"REDIS_URL": "h:1", "REDIS_TLS_CACERT": "/ca.pem"}, "REDIS_TLS_CACERT is set"},
		{"cert without key", map[string]string{"REDIS_URL": "h:1", "REDIS_TLS": "true", "REDIS_TLS_CLIENT_CERT": "/c.pem"}, "REDIS_TLS_CLIENT_KEY"},
		{"unix TLS", map[string]string{"REDIS_SOCKET_TYPE": "unix", "REDIS_URL": "/s", "REDIS_TLS": "true"}, "REDIS_TLS="},
		{"startup initial", map[string]string{"REDIS_URL": "h:1", "REDIS_STARTUP_INITIAL_INTERVAL": "0s"}, "REDIS_STARTUP_INITIAL_INTERVAL"},
		{"startup max", map[string]string{"REDIS_URL": "h:1", "REDIS_STARTUP_MAX_INTERVAL": "100ms"}, "REDIS_STARTUP_MAX_INTERVAL"},
		{"startup elapsed", map[string]string{"REDIS_URL": "h:1", "REDIS_STARTUP_MAX_ELAPSED_TIME": "-1s"}, "REDIS_STARTUP_MAX_ELAPSED_TIME"},
		{"per-second URL", map[string]string{"REDIS_URL": "h:1", "REDIS_PERSECOND": "true"}, "REDIS_PERSECOND_URL is empty"},
		{"per-second type", map[string]string{"REDIS_URL": "h:1", "REDIS_PERSECOND": "true", "REDIS_PERSECOND_URL": "a:1,b:2"}, "REDIS_PERSECOND_TYPE=cluster"},
		{"per-second timeout", map[string]string{"REDIS_URL": "h:1", "REDIS_PERSECOND": "true", "REDIS_PERSECOND_URL": "p:1", "REDIS_PERSECOND_TIMEOUT": "0s"}, "REDIS_PERSECOND_TIMEOUT=0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := FromEnv(env(tt.env))
			if err != nil {
				t.Fatal(err)
			}
			err = s.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate() = %v, want it to contain %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "topsecret") {
				t.Errorf("Validate() = %v: prints a password", err)
			}
			tt.env["BACKEND_TYPE"] = "memory"
			if s, err = FromEnv(env(tt.env)); err != nil {
				t.Fatal(err)
			}
			if err := s.Validate(); err != nil {
				t.Errorf("Validate() beside BACKEND_TYPE=memory = %v, want the REDIS_* settings ignored", err)
			}
		})
	}
}

// TestRedisSecretsNeverPrinted: neither the flags' help nor the table
// shows REDIS_AUTH or a password in REDIS_URL.
func TestRedisSecretsNeverPrinted(t *testing.T) {
	s, err := FromEnv(env(map[string]string{
		"REDIS_URL": "redis://alice:topsecret@r:6379", "REDIS_SENTINEL_AUTH": "topsecret",
		"REDIS_PERSECOND_AUTH": "topsecret", "REDIS_PERSECOND_URL": "rediss://:topsecret@p:6379",
	}))
	if err != nil {
		t.Fatal(err)
	}
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	var b strings.Builder
	fs.SetOutput(&b)
	s.RegisterFlags(fs)
	fs.PrintDefaults()
	if strings.Contains(b.String(), "topsecret") {
		t.Error("flag help prints a Redis password")
	}
	if got := fs.Lookup("redis_url").DefValue; got != "redis://alice:***@r:6379" {
		t.Errorf("-redis_url default = %q, want the password masked", got)
	}
	if s.RedisURL != "redis://alice:topsecret@r:6379" {
		t.Errorf("RedisURL = %q, want it kept whole", s.RedisURL)
	}
}
