package config

import (
	"bufio"
	"os"
	"slices"
	"strings"
	"testing"
)

// oldSettings reads the recorded list of every variable envoyproxy/ratelimit
// reads.
func oldSettings(t *testing.T) []string {
	t.Helper()
	f, err := os.Open("testdata/envoyproxy-ratelimit-settings.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var names []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" && !strings.HasPrefix(l, "#") {
			names = append(names, l)
		}
	}
	if len(names) < 100 {
		t.Fatalf("recorded settings: %d names, want the whole list", len(names))
	}
	return names
}

// TestEveryOldSettingClassified: each of envoyproxy/ratelimit's settings is
// either bound with a compatibility entry, or listed as unbound with one.
func TestEveryOldSettingClassified(t *testing.T) {
	bound := map[string]bool{}
	for _, v := range Table() {
		bound[v.Name] = true
	}
	for _, n := range oldSettings(t) {
		if bound[n] {
			if _, ok := compatBound[n]; !ok {
				t.Errorf("%s is bound but has no compatBound entry", n)
			}
			continue
		}
		l, ok := legacy[n]
		if !ok {
			t.Errorf("%s is neither bound nor in legacy", n)
			continue
		}
		if !slices.ContainsFunc(Unbound(), func(v Var) bool { return v.Name == l.row }) {
			t.Errorf("%s: its row %q is missing from Unbound()", n, l.row)
		}
	}
}

func TestCheckLegacy(t *testing.T) {
	tests := []struct {
		name        string
		env         map[string]string
		wantIgnored []string
		wantErr     []string // substrings
	}{
		{name: "none", env: map[string]string{}},
		{
			name: "envoy gateway's redis settings select redis",
			env: map[string]string{
				"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis.redis-system.svc.cluster.local:6379",
				"CONFIG_TYPE": "FILE", "USE_DOG_STATSD": "false",
			},
		},
		{
			name: "redis settings beside another store",
			env: map[string]string{
				"BACKEND_TYPE": "memory", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis:6379", "REDIS_POOL_SIZE": "many",
			},
			wantIgnored: []string{"REDIS_POOL_SIZE", "REDIS_SOCKET_TYPE", "REDIS_URL"},
		},
		{
			name:        "redis settings without a redis",
			env:         map[string]string{"BACKEND_TYPE": "DynamoDB", "REDIS_PERSECOND_URL": "r:1"},
			wantIgnored: []string{"REDIS_PERSECOND_URL"},
		},
		{
			name: "redis settings that do not apply",
			env: map[string]string{
				"BACKEND_TYPE": "redis", "REDIS_URL": "redis:6379", "REDIS_PIPELINE_LIMIT": "8",
				"REDIS_CLUSTER_PIPELINE_PARALLELISM": "0",
			},
			wantIgnored: []string{"REDIS_CLUSTER_PIPELINE_PARALLELISM", "REDIS_PIPELINE_LIMIT"},
		},
		{
			name:        "memcache and tuning",
			env:         map[string]string{"MEMCACHE_HOST_PORT": "m:11211", "LOCAL_CACHE_SIZE_IN_BYTES": "1000", "CACHE_KEY_PREFIX": "x"},
			wantIgnored: []string{"CACHE_KEY_PREFIX", "LOCAL_CACHE_SIZE_IN_BYTES", "MEMCACHE_HOST_PORT"},
		},
		{
			name:    "dogstatsd refused",
			env:     map[string]string{"USE_DOG_STATSD": "true"},
			wantErr: []string{"USE_DOG_STATSD", "USE_STATSD=true", "USE_PROMETHEUS=true"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ignored, err := CheckLegacy(env(tt.env))
			if !slices.Equal(ignored, tt.wantIgnored) {
				t.Errorf("CheckLegacy() ignored = %v, want %v", ignored, tt.wantIgnored)
			}
			if len(tt.wantErr) == 0 && err != nil {
				t.Errorf("CheckLegacy() = %v, want no error", err)
			}
			for _, w := range tt.wantErr {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("CheckLegacy() = %v, want it to mention %q", err, w)
				}
			}
		})
	}
}

func TestCheckLegacyConfigType(t *testing.T) {
	if _, bound := compatBoundBinding("CONFIG_TYPE"); bound {
		return // read by a binding: its own values are checked there
	}
	_, err := CheckLegacy(env(map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW"}))
	if err == nil || !strings.Contains(err.Error(), "CONFIG_TYPE") {
		t.Errorf("CheckLegacy(CONFIG_TYPE=GRPC_XDS_SOTW) = %v, want a refusal", err)
	}
}

func compatBoundBinding(name string) (Var, bool) {
	for _, v := range Table() {
		if v.Name == name {
			return v, true
		}
	}
	return Var{}, false
}

func TestBackendTypeRefusalSaysWhatToUse(t *testing.T) {
	for _, v := range []string{"memcache", "MEMCACHE"} {
		_, err := FromEnv(env(map[string]string{"BACKEND_TYPE": v}))
		for _, want := range []string{"memory", "dynamodb", "redis"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("FromEnv(BACKEND_TYPE=%s) = %v, want a refusal naming %s", v, err, want)
			}
		}
	}
}

func TestOldServiceSettings(t *testing.T) {
	s, err := FromEnv(env(map[string]string{
		"GRPC_MAX_CONNECTION_AGE": "0", "QUOTA_MODE": "true", "GRPC_UDS": "/tmp/rl.sock",
		"USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": ":19001", "EXTRA_TAGS": "a:1, b:two",
		"LOG_LEVEL": "WARN", "LOG_FORMAT": "text",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(); err != nil {
		t.Fatalf("Validate() = %v, want nil", err)
	}
	if s.GRPCMaxConnectionAge != 0 || !s.QuotaMode || s.GRPCUDS != "/tmp/rl.sock" || !s.UsePrometheus || s.PrometheusAddr != ":19001" {
		t.Errorf("FromEnv() = %+v", s)
	}
	if got := s.ExtraTagMap(); len(got) != 2 || got["a"] != "1" || got["b"] != "two" {
		t.Errorf("ExtraTagMap() = %v, want a:1 b:two", got)
	}
	if _, err := FromEnv(env(map[string]string{"EXTRA_TAGS": "novalue"})); err == nil {
		t.Error("FromEnv(EXTRA_TAGS=novalue) = nil error, want one")
	}
}
