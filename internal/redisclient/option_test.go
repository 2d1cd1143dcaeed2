package redisclient

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// target is a valid single target with the defaults, at url.
func target(url string) Target {
	return Target{Setting: "REDIS", SocketType: "tcp", Type: "SINGLE", URL: url, PoolSize: DefaultPoolSize, Timeout: DefaultTimeout}
}

func TestClientOptionAddresses(t *testing.T) {
	tests := []struct {
		name       string
		t          Target
		wantAddrs  []string
		wantSingle bool
		wantMaster string
		wantDB     int
		wantTLS    bool
	}{
		{name: "envoy gateway", t: target("redis.envoy-gateway-system.svc.cluster.local:6379"),
			wantAddrs: []string{"redis.envoy-gateway-system.svc.cluster.local:6379"}, wantSingle: true},
		{name: "redis URL, default port, db", t: target("redis://cache/3"), wantAddrs: []string{"cache:6379"}, wantSingle: true, wantDB: 3},
		{name: "rediss URL", t: target("rediss://cache:6380"), wantAddrs: []string{"cache:6380"}, wantSingle: true, wantTLS: true},
		{name: "ipv6", t: target("[::1]:7000"), wantAddrs: []string{"[::1]:7000"}, wantSingle: true},
		{name: "ipv6 URL without port", t: target("redis://[::1]"), wantAddrs: []string{"[::1]:6379"}, wantSingle: true},
		{name: "cluster seeds", t: func() Target { x := target("n1:7000, n2:7001 ,redis://n3"); x.Type = "Cluster"; return x }(),
			wantAddrs: []string{"n1:7000", "n2:7001", "n3:6379"}},
		{name: "sentinel", t: func() Target { x := target("mymaster,s1:26379,s2:26379"); x.Type = "sentinel"; return x }(),
			wantAddrs: []string{"s1:26379", "s2:26379"}, wantMaster: "mymaster"},
		{name: "unix", t: func() Target { x := target("/var/run/redis.sock"); x.SocketType = "UNIX"; return x }(),
			wantAddrs: []string{"/var/run/redis.sock"}, wantSingle: true},
		{name: "unix URL", t: func() Target { x := target("unix:///var/run/redis.sock"); x.SocketType = "unix"; return x }(),
			wantAddrs: []string{"/var/run/redis.sock"}, wantSingle: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opt, err := tt.t.ClientOption(TLSFiles{})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(opt.InitAddress, tt.wantAddrs) {
				t.Errorf("InitAddress = %q, want %q", opt.InitAddress, tt.wantAddrs)
			}
			if opt.ForceSingleClient != tt.wantSingle {
				t.Errorf("ForceSingleClient = %v, want %v", opt.ForceSingleClient, tt.wantSingle)
			}
			if opt.Sentinel.MasterSet != tt.wantMaster {
				t.Errorf("Sentinel.MasterSet = %q, want %q", opt.Sentinel.MasterSet, tt.wantMaster)
			}
			if opt.SelectDB != tt.wantDB {
				t.Errorf("SelectDB = %d, want %d", opt.SelectDB, tt.wantDB)
			}
			if (opt.TLSConfig != nil) != tt.wantTLS {
				t.Errorf("TLSConfig = %v, want TLS %v", opt.TLSConfig, tt.wantTLS)
			}
			if !opt.DisableCache || opt.DialCtxFn == nil {
				t.Errorf("DisableCache = %v, DialCtxFn set = %v: want both", opt.DisableCache, opt.DialCtxFn != nil)
			}
		})
	}
}

func TestClientOptionTuning(t *testing.T) {
	x := target("r:6379")
	x.PoolSize, x.PipelineWindow, x.Timeout = 42, 150*time.Microsecond, 250*time.Millisecond
	opt, err := x.ClientOption(TLSFiles{})
	if err != nil {
		t.Fatal(err)
	}
	if opt.BlockingPoolSize != 42 || opt.MaxFlushDelay != 150*time.Microsecond {
		t.Errorf("BlockingPoolSize, MaxFlushDelay = %d, %s; want 42, 150µs", opt.BlockingPoolSize, opt.MaxFlushDelay)
	}
	if opt.Dialer.Timeout != 250*time.Millisecond || opt.ConnWriteTimeout != 250*time.Millisecond {
		t.Errorf("Dialer.Timeout, ConnWriteTimeout = %s, %s; want 250ms both", opt.Dialer.Timeout, opt.ConnWriteTimeout)
	}
}

func TestClientOptionAuth(t *testing.T) {
	tests := []struct {
		name, url, auth, sentinelAuth string
		typ                           string
		wantUser, wantPass            string
		wantSUser, wantSPass          string
	}{
		{name: "password", url: "r:6379", auth: "s3cret", wantPass: "s3cret"},
		{name: "user and password", url: "r:6379", auth: "alice:s3cret", wantUser: "alice", wantPass: "s3cret"},
		{name: "split at the first colon", url: "r:6379", auth: "alice:s3:cr:et", wantUser: "alice", wantPass: "s3:cr:et"},
		{name: "empty user", url: "r:6379", auth: ":s3cret", wantPass: "s3cret"},
		{name: "URL user info", url: "redis://alice:s3cret@r:6379", wantUser: "alice", wantPass: "s3cret"},
		{name: "URL password only", url: "redis://:s3cret@r:6379", wantPass: "s3cret"},
		{name: "sentinel", url: "m,s1:26379", typ: "sentinel", auth: "bob:pw", sentinelAuth: "sentinelpw",
			wantUser: "bob", wantPass: "pw", wantSPass: "sentinelpw"},
		{name: "sentinel with user", url: "m,s1:26379", typ: "sentinel", sentinelAuth: "watch:pw2", wantSUser: "watch", wantSPass: "pw2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := target(tt.url)
			x.Auth, x.SentinelAuth = tt.auth, tt.sentinelAuth
			if tt.typ != "" {
				x.Type = tt.typ
			}
			opt, err := x.ClientOption(TLSFiles{})
			if err != nil {
				t.Fatal(err)
			}
			if opt.Username != tt.wantUser || opt.Password != tt.wantPass {
				t.Errorf("Username, Password = %q, %q; want %q, %q", opt.Username, opt.Password, tt.wantUser, tt.wantPass)
			}
			if opt.Sentinel.Username != tt.wantSUser || opt.Sentinel.Password != tt.wantSPass {
				t.Errorf("Sentinel Username, Password = %q, %q; want %q, %q", opt.Sentinel.Username, opt.Sentinel.Password, tt.wantSUser, tt.wantSPass)
			}
		})
	}
}

// TestCheckNamesTheSetting: every refusal names the setting at fault,
// with the per-second prefix on a per-second target, and never prints a
// password.
func TestCheckNamesTheSetting(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Target)
		want string
	}{
		{"empty URL", func(x *Target) { x.URL = "" }, "_URL is empty"},
		{"no port", func(x *Target) { x.URL = "redis-host" }, "_URL="},
		{"bad port", func(x *Target) { x.URL = "h:99999" }, "_URL="},
		{"empty part", func(x *Target) { x.Type = "cluster"; x.URL = "a:1,,b:2" }, "_URL="},
		{"two addresses on single", func(x *Target) { x.URL = "a:1,b:2" }, "_TYPE=cluster"},
		{"bad scheme", func(x *Target) { x.URL = "http://h:1" }, "_URL="},
		{"URL options", func(x *Target) { x.URL = "redis://h:1?dial_timeout=1s" }, "_URL="},
		{"bad db", func(x *Target) { x.URL = "redis://h:1/x" }, "_URL="},
		{"cluster db", func(x *Target) { x.Type = "cluster"; x.URL = "redis://h:1/2" }, "_URL="},
		{"mixed schemes", func(x *Target) { x.Type = "cluster"; x.URL = "redis://h:1,rediss://g:1" }, "_URL="},
		{"sentinel without master", func(x *Target) { x.Type = "sentinel"; x.URL = "s1:26379,s2:26379" }, "_URL="},
		{"sentinel alone", func(x *Target) { x.Type = "sentinel"; x.URL = "mymaster" }, "_URL="},
		{"sentinel credentials", func(x *Target) { x.Type = "sentinel"; x.URL = "m,redis://u:pw@s1:26379" }, "_SENTINEL_AUTH"},
		{"bad socket type", func(x *Target) { x.SocketType = "udp" }, "_SOCKET_TYPE="},
		{"bad type", func(x *Target) { x.Type = "ring" }, "_TYPE="},
		{"unix cluster", func(x *Target) { x.SocketType = "unix"; x.Type = "cluster"; x.URL = "/s" }, "_SOCKET_TYPE=unix"},
		{"unix relative", func(x *Target) { x.SocketType = "unix"; x.URL = "redis.sock" }, "_URL="},
		{"unix TLS", func(x *Target) { x.SocketType = "unix"; x.URL = "/s"; x.TLS = true }, "_TLS="},
		{"auth twice", func(x *Target) { x.URL = "redis://u:pw@h:1"; x.Auth = "pw" }, "_AUTH"},
		{"pool size", func(x *Target) { x.PoolSize = 0 }, "_POOL_SIZE="},
		{"window", func(x *Target) { x.PipelineWindow = -time.Second }, "_PIPELINE_WINDOW="},
		{"timeout", func(x *Target) { x.Timeout = 0 }, "_TIMEOUT="},
	}
	for _, tt := range tests {
		for _, prefix := range []string{"REDIS", "REDIS_PERSECOND"} {
			t.Run(tt.name+"/"+prefix, func(t *testing.T) {
				x := target("h:6379")
				x.Setting = prefix
				tt.edit(&x)
				err := x.Check()
				if err == nil || !strings.Contains(err.Error(), prefix+tt.want) {
					t.Fatalf("Check() = %v, want it to name %s%s", err, prefix, tt.want)
				}
				if strings.Contains(err.Error(), "pw@") {
					t.Errorf("Check() = %v: prints a password", err)
				}
				if _, err := x.ClientOption(TLSFiles{}); err == nil {
					t.Error("ClientOption() = nil error, want Check's")
				}
			})
		}
	}
}

func TestString(t *testing.T) {
	tests := []struct {
		t    Target
		want string
	}{
		{target("r:6379"), "redis single r:6379"},
		{func() Target { x := target("redis://alice:s3cret@r:6379/2"); x.TLS = true; return x }(),
			"redis single r:6379 (tls, db 2, user alice, password set)"},
		{func() Target { x := target("a:1,b:2"); x.Type = "cluster"; x.Auth = "pw"; return x }(), "redis cluster a:1,b:2 (password set)"},
		{func() Target { x := target("m,s1:26379"); x.Type = "sentinel"; x.SentinelAuth = "spw"; return x }(),
			"redis sentinel master m via sentinels s1:26379 (sentinel password set)"},
		{func() Target { x := target("/run/r.sock"); x.SocketType = "unix"; return x }(), "redis single unix /run/r.sock"},
		{target("redis://alice:s3cret@r:6379?x=1"), "redis single tcp redis://alice:***@r:6379?x=1 (invalid: REDIS_URL)"},
		{target("redis://s3cret@r:6379/x"), "redis single tcp redis://***@r:6379/x (invalid: REDIS_URL)"},
	}
	for _, tt := range tests {
		if got := tt.t.String(); got != tt.want {
			t.Errorf("String() = %q, want %q", got, tt.want)
		}
		if strings.Contains(tt.t.String(), "s3cret") {
			t.Errorf("String() = %q: prints a password", tt.t.String())
		}
	}
}

func TestOptionsString(t *testing.T) {
	ps := target("redis://:s3cret@p:1")
	o := Options{Main: target("m:1"), PerSecond: &ps}
	if got, want := o.String(), "redis single m:1; per-second redis single p:1 (password set)"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if got := fmt.Sprintf("%v %+v", o, o); strings.Contains(got, "s3cret") {
		t.Errorf("Options print as %q: a password", got)
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"h:1":                           "h:1",
		"redis://u:pw@h:1,redis://h:2":  "redis://u:***@h:1,redis://h:2",
		"rediss://:pw@h:1":              "rediss://:***@h:1",
		"redis://u:p%zz@h:1":            "redis://***@h:1",
		"redis://u:p@w@h:1":             "redis://u:***@h:1",
		"mymaster,redis://u:pw@s:26379": "mymaster,redis://u:***@s:26379",
	} {
		if got := RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}
