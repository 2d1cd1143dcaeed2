package config

import (
	"flag"
	"io"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/internal/lease"
)

// env returns a getenv over m.
func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestDefaultsValid(t *testing.T) {
	if err := Defaults().Validate(); err != nil {
		t.Fatalf("Defaults().Validate() = %v, want nil", err)
	}
}

func TestFromEnvEmptyIsDefaults(t *testing.T) {
	got, err := FromEnv(env(nil))
	if err != nil {
		t.Fatalf("FromEnv(empty) error = %v, want nil", err)
	}
	if want := Defaults(); got != want {
		t.Errorf("FromEnv(empty) = %+v, want %+v", got, want)
	}
}

func TestFromEnv(t *testing.T) {
	tests := []struct {
		name  string
		env   map[string]string
		check func(s Settings) bool
	}{
		{"int", map[string]string{"GRPC_PORT": "9091"}, func(s Settings) bool { return s.GRPCPort == 9091 }},
		{"int spaces", map[string]string{"PORT": " 81 "}, func(s Settings) bool { return s.Port == 81 }},
		{"string", map[string]string{"GRPC_HOST": "127.0.0.1"}, func(s Settings) bool { return s.GRPCHost == "127.0.0.1" }},
		{"bool", map[string]string{"SHADOW_MODE": "true"}, func(s Settings) bool { return s.ShadowMode }},
		{"bool 1", map[string]string{"MERGE_DOMAIN_CONFIG": "1"}, func(s Settings) bool { return s.MergeDomainConfig }},
		{"bool false", map[string]string{"RUNTIME_WATCH_ROOT": "false"}, func(s Settings) bool { return !s.RuntimeWatchRoot }},
		{"duration", map[string]string{"BACKEND_TIMEOUT": "7ms"}, func(s Settings) bool { return s.BackendTimeout == 7*time.Millisecond }},
		{"float", map[string]string{"NEAR_LIMIT_RATIO": "0.5"}, func(s Settings) bool { return s.NearLimitRatio == 0.5 }},
		{"enum lower-cased", map[string]string{"BACKEND_TYPE": "DynamoDB"}, func(s Settings) bool { return s.BackendType == BackendDynamoDB }},
		{"log level upper", map[string]string{"LOG_LEVEL": "WARN"}, func(s Settings) bool { return s.LogLevel == "warn" }},
		{"on unavailable", map[string]string{"ON_UNAVAILABLE": "block"}, func(s Settings) bool { return s.OnUnavailable == OnUnavailableBlock }},
		{"tls files", map[string]string{"GRPC_SERVER_TLS_CERT": "/c.pem", "GRPC_SERVER_TLS_KEY": "/k.pem"}, func(s Settings) bool {
			return s.GRPCServerTLSCert == "/c.pem" && s.GRPCServerTLSKey == "/k.pem"
		}},
		{"config dir", map[string]string{"CONFIG_DIR": "/etc/ratelimit"}, func(s Settings) bool { return s.ConfigDirOverride == "/etc/ratelimit" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := FromEnv(env(tt.env))
			if err != nil {
				t.Fatalf("FromEnv(%v) error = %v, want nil", tt.env, err)
			}
			if !tt.check(s) {
				t.Errorf("FromEnv(%v) = %+v, want the variable applied", tt.env, s)
			}
		})
	}
}

func TestFromEnvErrors(t *testing.T) {
	tests := []struct {
		name, variable, value string
	}{
		{"int", "GRPC_PORT", "eighty"},
		{"bool", "SHADOW_MODE", "yes please"},
		{"duration without unit", "SHUTDOWN_DRAIN", "5"},
		{"float", "NEAR_LIMIT_RATIO", "most"},
		{"enum", "BACKEND_TYPE", "cassandra"},
		{"log level", "LOG_LEVEL", "loud"},
		{"log format", "LOG_FORMAT", "xml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := FromEnv(env(map[string]string{tt.variable: tt.value}))
			if err == nil {
				t.Fatalf("FromEnv(%s=%q) error = nil, want an error", tt.variable, tt.value)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "config: ") || !strings.Contains(msg, tt.variable) || !strings.Contains(msg, tt.value) {
				t.Errorf("FromEnv(%s=%q) error = %q, want it prefixed and naming the variable and value", tt.variable, tt.value, msg)
			}
		})
	}
}

func TestFromEnvReportsEveryBadVariable(t *testing.T) {
	_, err := FromEnv(env(map[string]string{"PORT": "x", "DEBUG_PORT": "y"}))
	if err == nil || !strings.Contains(err.Error(), "PORT=\"x\"") || !strings.Contains(err.Error(), "DEBUG_PORT=\"y\"") {
		t.Errorf("FromEnv(PORT=x, DEBUG_PORT=y) error = %v, want both named", err)
	}
}

func TestFlagsOverrideEnv(t *testing.T) {
	s, err := FromEnv(env(map[string]string{"GRPC_PORT": "9000", "LOG_LEVEL": "debug", "SHADOW_MODE": "true"}))
	if err != nil {
		t.Fatalf("FromEnv error = %v", err)
	}
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	s.RegisterFlags(fs)
	if got := fs.Lookup("grpc_port").DefValue; got != "9000" {
		t.Errorf("flag grpc_port default = %q, want the env value 9000", got)
	}
	if err := fs.Parse([]string{"-grpc_port=9100", "-backend_timeout", "20ms", "-on_unavailable=BLOCK", "-runtime_watch_root=false"}); err != nil {
		t.Fatalf("Parse error = %v", err)
	}
	want := Defaults()
	want.GRPCPort = 9100
	want.LogLevel = "debug"
	want.ShadowMode = true
	want.BackendTimeout = 20 * time.Millisecond
	want.OnUnavailable = OnUnavailableBlock
	want.RuntimeWatchRoot = false
	if s != want {
		t.Errorf("after flags = %+v, want %+v", s, want)
	}
}

func TestBoolFlagAlone(t *testing.T) {
	s := Defaults()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	s.RegisterFlags(fs)
	if err := fs.Parse([]string{"-shadow_mode"}); err != nil {
		t.Fatalf("Parse(-shadow_mode) error = %v", err)
	}
	if !s.ShadowMode {
		t.Errorf("Parse(-shadow_mode): ShadowMode = false, want true")
	}
}

func TestBadFlag(t *testing.T) {
	s := Defaults()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	s.RegisterFlags(fs)
	err := fs.Parse([]string{"-backend_type=cassandra"})
	if err == nil || !strings.Contains(err.Error(), "backend_type") {
		t.Errorf("Parse(-backend_type=cassandra) error = %v, want one naming the flag", err)
	}
}

func TestFlagHelpPrints(t *testing.T) {
	s := Defaults()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	var b strings.Builder
	fs.SetOutput(&b)
	s.RegisterFlags(fs)
	fs.PrintDefaults()
	for _, v := range Table() {
		if !strings.Contains(b.String(), "-"+strings.ToLower(v.Name)) {
			t.Errorf("PrintDefaults() lacks -%s", strings.ToLower(v.Name))
		}
	}
}

// TestLeaseKeysNeverPrinted wants the lease keys out of flag help and the
// settings table however they were set.
func TestLeaseKeysNeverPrinted(t *testing.T) {
	const key, prev = "the-current-signing-key-0123456789", "the-previous-signing-key-0123456789"
	s, err := FromEnv(env(map[string]string{"LEASE_SIGNING_KEY": key, "LEASE_SIGNING_KEY_PREVIOUS": prev + "," + key}))
	if err != nil {
		t.Fatal(err)
	}
	if s.LeaseSigningKey != key || len(s.LeasePreviousKeys()) != 2 || s.LeasePreviousKeys()[0] != prev {
		t.Fatalf("FromEnv read %q and %q, want the key and two previous keys", s.LeaseSigningKey, s.LeasePreviousKeys())
	}
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	var b strings.Builder
	fs.SetOutput(&b)
	s.RegisterFlags(fs)
	fs.PrintDefaults()
	b.WriteString(MarkdownTable())
	for _, v := range bindings(&s) {
		b.WriteString(v.value.String())
	}
	if strings.Contains(b.String(), "signing-key-0123") {
		t.Error("a lease key is printed in flag help, the settings table or a binding's String")
	}
	if err := fs.Parse([]string{"-lease_signing_key", prev}); err != nil || s.LeaseSigningKey != prev {
		t.Errorf("-lease_signing_key = %v, %q; want it set", err, s.LeaseSigningKey)
	}
}

func TestLeaseKeyring(t *testing.T) {
	key := strings.Repeat("k", 32)
	s := Defaults()
	if k, generated, err := s.LeaseKeyring(); err != nil || !generated || k == nil {
		t.Errorf("LeaseKeyring() with no key = %v, %v, %v; want a generated keyring", k, generated, err)
	}
	s.LeaseSigningKey = key
	k, generated, err := s.LeaseKeyring()
	if err != nil || generated {
		t.Fatalf("LeaseKeyring() = %v, %v, %v; want the configured key", k, generated, err)
	}
	if want, _ := lease.NewKeyring([]byte(key)); k.KeyID() != want.KeyID() {
		t.Errorf("LeaseKeyring().KeyID() = %s, want %s", k.KeyID(), want.KeyID())
	}
	if got := (Settings{}).LeasePreviousKeys(); got != nil {
		t.Errorf("LeasePreviousKeys() of nothing = %q, want nil", got)
	}
}

// derivedFields are the fields of Settings that no variable sets: what
// FromEnv concluded from the others.
var derivedFields = []string{"BackendInferred"}

// TestTableCoversEveryField holds the one-list invariant: every field of
// Settings but the derived ones has exactly one variable, and no variable
// is listed twice.
func TestTableCoversEveryField(t *testing.T) {
	table := Table()
	if n := reflect.TypeFor[Settings]().NumField() - len(derivedFields); len(table) != n {
		t.Errorf("len(Table()) = %d, want %d (one per Settings field)", len(table), n)
	}
	seen := map[string]bool{}
	for _, v := range table {
		if seen[v.Name] {
			t.Errorf("Table() lists %s twice", v.Name)
		}
		seen[v.Name] = true
		if v.Help == "" {
			t.Errorf("Table() %s has no help", v.Name)
		}
	}
	// Every field is bound to a distinct variable: setting each one through
	// its binding changes exactly one field.
	var s Settings
	bs := bindings(&s)
	fields := map[uintptr]string{}
	base := reflect.ValueOf(&s).Elem()
	for i := 0; i < base.NumField(); i++ {
		fields[base.Field(i).Addr().Pointer()] = base.Type().Field(i).Name
	}
	bound := map[string]string{}
	for _, b := range bs {
		p := reflect.ValueOf(b.value).Pointer()
		if ev, ok := b.value.(*enumValue); ok {
			p = reflect.ValueOf(ev.p).Pointer()
		}
		if bv, ok := b.value.(*backendValue); ok {
			p = reflect.ValueOf(bv.p).Pointer()
		}
		name, ok := fields[p]
		if !ok {
			t.Errorf("%s is not bound to a Settings field", b.name)
			continue
		}
		if other, dup := bound[name]; dup {
			t.Errorf("%s and %s both bind field %s", other, b.name, name)
		}
		bound[name] = b.name
	}
}

func TestTableDefaults(t *testing.T) {
	want := map[string]string{
		"HOST":                     "0.0.0.0",
		"PORT":                     "8080",
		"GRPC_PORT":                "8081",
		"DEBUG_PORT":               "6070",
		"RUNTIME_ROOT":             "/srv/runtime_data/current",
		"RUNTIME_SUBDIRECTORY":     "",
		"RUNTIME_APPDIRECTORY":     "config",
		"RUNTIME_IGNOREDOTFILES":   "false",
		"RUNTIME_WATCH_ROOT":       "true",
		"LOG_LEVEL":                "info",
		"LOG_FORMAT":               "json",
		"BACKEND_TYPE":             "memory",
		"NEAR_LIMIT_RATIO":         "0.8",
		"LIMIT_LIMIT_HEADER":       "RateLimit-Limit",
		"GRPC_MAX_CONNECTION_AGE":  "24h0m0s",
		"SHUTDOWN_DRAIN":           "5s",
		"REQUEST_MAX_DESCRIPTORS":  "256",
		"REQUEST_MAX_ENTRIES":      "64",
		"REQUEST_MAX_ENTRY_BYTES":  "8192",
		"HTTP_READ_HEADER_TIMEOUT": "5s",
		"HTTP_READ_TIMEOUT":        "10s",
		"HTTP_IDLE_TIMEOUT":        "1m0s",
		"HTTP_MAX_CONNECTIONS":     "0",
		"SHUTDOWN_TIMEOUT":         "10s",
		"MEMORY_MAX_BUCKETS":       "1000000",
		"MEMORY_MAX_BYTES":         "1073741824",
		"ON_UNAVAILABLE":           "local",
		"FLEET_SIZE":               "0",
		"BACKEND_TIMEOUT":          "15ms",
		"DYNAMODB_TABLE":           "dynalimit",
		"DYNAMODB_ENDPOINT":        "",
		"AWS_REGION":               "us-east-1",
		"NAMESPACE":                "default",
		"CONFIG_CACHE_TTL":         "1m0s",
		"REJECTION_CACHE_SIZE":     "100000",
		"USAGE_RETENTION":          "9600h0m0s",
		"LEASE_SIGNING_KEY":        "",
		"LEASE_SIGNING_KEY_FILE":   "",
		"LEASE_TTL":                "15m0s",
	}
	got := map[string]string{}
	for _, v := range Table() {
		got[v.Name] = v.Default
	}
	for name, w := range want {
		if g, ok := got[name]; !ok || g != w {
			t.Errorf("Table() %s default = %q (listed %v), want %q", name, g, ok, w)
		}
	}
	// Every default round-trips through FromEnv.
	m := map[string]string{}
	for _, v := range Table() {
		m[v.Name] = v.Default
	}
	s, err := FromEnv(env(m))
	if err != nil || s != Defaults() {
		t.Errorf("FromEnv(Table defaults) = %+v, %v, want Defaults(), nil", s, err)
	}
}

func TestConfigDir(t *testing.T) {
	tests := []struct {
		name      string
		mod       func(*Settings)
		dir, wdir string
	}{
		{"defaults", func(*Settings) {}, "/srv/runtime_data/current/config", "/srv/runtime_data/current"},
		{"subdirectory", func(s *Settings) { s.RuntimeSubdirectory = "ratelimit" }, "/srv/runtime_data/current/ratelimit/config", "/srv/runtime_data/current"},
		{"no watch root", func(s *Settings) { s.RuntimeSubdirectory = "rl"; s.RuntimeWatchRoot = false }, "/srv/runtime_data/current/rl/config", "/srv/runtime_data/current/rl/config"},
		{"config dir", func(s *Settings) { s.ConfigDirOverride = "/etc/ratelimit/" }, "/etc/ratelimit", "/etc/ratelimit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := Defaults()
			tt.mod(&s)
			if got := s.ConfigDir(); got != tt.dir {
				t.Errorf("ConfigDir() = %q, want %q", got, tt.dir)
			}
			if got := s.WatchDir(); got != tt.wdir {
				t.Errorf("WatchDir() = %q, want %q", got, tt.wdir)
			}
		})
	}
}

func TestLoadOptions(t *testing.T) {
	s := Defaults()
	s.MergeDomainConfig, s.RuntimeIgnoreDotFiles = true, true
	o := s.LoadOptions()
	if !o.MergeDomains || !o.IgnoreDotFiles {
		t.Errorf("LoadOptions() = %+v, want both true", o)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Settings)
		want string // substring of the error; "" means valid
	}{
		{"defaults", func(*Settings) {}, ""},
		{"port zero is ephemeral", func(s *Settings) { s.GRPCPort = 0 }, ""},
		{"port too big", func(s *Settings) { s.Port = 70000 }, "PORT=70000"},
		{"negative debug port", func(s *Settings) { s.DebugPort = -1 }, "DEBUG_PORT=-1"},
		{"ratio zero", func(s *Settings) { s.NearLimitRatio = 0 }, "NEAR_LIMIT_RATIO"},
		{"ratio one", func(s *Settings) { s.NearLimitRatio = 1 }, ""},
		{"ratio above one", func(s *Settings) { s.NearLimitRatio = 1.01 }, "NEAR_LIMIT_RATIO"},
		{"ratio NaN", func(s *Settings) { s.NearLimitRatio = math.NaN() }, "NEAR_LIMIT_RATIO"},
		{"unknown backend", func(s *Settings) { s.BackendType = "cassandra" }, "BACKEND_TYPE=\"cassandra\""},
		{"unknown on unavailable", func(s *Settings) { s.OnUnavailable = "maybe" }, "ON_UNAVAILABLE"},
		{"unknown log format", func(s *Settings) { s.LogFormat = "xml" }, "LOG_FORMAT"},
		{"unknown log level", func(s *Settings) { s.LogLevel = "loud" }, "LOG_LEVEL"},
		{"tls without cert", func(s *Settings) { s.GRPCServerUseTLS = true; s.GRPCServerTLSKey = "k" }, "GRPC_SERVER_TLS_CERT is empty"},
		{"tls without key", func(s *Settings) { s.GRPCServerUseTLS = true; s.GRPCServerTLSCert = "c" }, "GRPC_SERVER_TLS_KEY is empty"},
		{"tls complete", func(s *Settings) { s.GRPCServerUseTLS = true; s.GRPCServerTLSCert = "c"; s.GRPCServerTLSKey = "k" }, ""},
		{"client ca without tls", func(s *Settings) { s.GRPCClientTLSCACert = "ca" }, "GRPC_CLIENT_TLS_CACERT is set"},
		{"san without ca", func(s *Settings) {
			s.GRPCServerUseTLS, s.GRPCServerTLSCert, s.GRPCServerTLSKey, s.GRPCClientTLSSAN = true, "c", "k", "client"
		}, "GRPC_CLIENT_TLS_SAN"},
		{"mtls complete", func(s *Settings) {
			s.GRPCServerUseTLS, s.GRPCServerTLSCert, s.GRPCServerTLSKey = true, "c", "k"
			s.GRPCClientTLSCACert, s.GRPCClientTLSSAN = "ca", "client"
		}, ""},
		{"zero backend timeout", func(s *Settings) { s.BackendTimeout = 0 }, "BACKEND_TIMEOUT"},
		{"negative drain", func(s *Settings) { s.ShutdownDrain = -time.Second }, "SHUTDOWN_DRAIN"},
		{"zero drain", func(s *Settings) { s.ShutdownDrain = 0 }, ""},
		{"zero shutdown timeout", func(s *Settings) { s.ShutdownTimeout = 0 }, "SHUTDOWN_TIMEOUT"},
		{"zero max buckets", func(s *Settings) { s.MemoryMaxBuckets = 0 }, "MEMORY_MAX_BUCKETS"},
		{"zero max bytes", func(s *Settings) { s.MemoryMaxBytes = 0 }, "MEMORY_MAX_BYTES"},
		{"zero max descriptors", func(s *Settings) { s.RequestMaxDescriptors = 0 }, "REQUEST_MAX_DESCRIPTORS"},
		{"zero max entries", func(s *Settings) { s.RequestMaxEntries = 0 }, "REQUEST_MAX_ENTRIES"},
		{"negative max entry bytes", func(s *Settings) { s.RequestMaxEntryBytes = -1 }, "REQUEST_MAX_ENTRY_BYTES"},
		{"zero read timeout", func(s *Settings) { s.HTTPReadTimeout = 0 }, "HTTP_READ_TIMEOUT"},
		{"negative max connections", func(s *Settings) { s.HTTPMaxConnections = -1 }, "HTTP_MAX_CONNECTIONS"},
		{"negative rejection cache", func(s *Settings) { s.RejectionCacheSize = -1 }, "REJECTION_CACHE_SIZE"},
		{"zero rejection cache", func(s *Settings) { s.RejectionCacheSize = 0 }, ""},
		{"empty namespace", func(s *Settings) { s.Namespace = "" }, "NAMESPACE"},
		{"namespace with a slash", func(s *Settings) { s.Namespace = "team/a" }, "NAMESPACE"},
		{"namespace too long", func(s *Settings) { s.Namespace = strings.Repeat("a", 65) }, "NAMESPACE"},
		{"namespace with dots", func(s *Settings) { s.Namespace = "team-a.eu_1" }, ""},
		{"dynamodb without table", func(s *Settings) { s.BackendType = BackendDynamoDB; s.DynamoDBTable = "" }, "DYNAMODB_TABLE"},
		{"memory without table", func(s *Settings) { s.DynamoDBTable = "" }, ""},
		{"no descriptor dir", func(s *Settings) { s.RuntimeRoot = "" }, "RUNTIME_ROOT"},
		{"config dir instead of root", func(s *Settings) { s.RuntimeRoot = ""; s.ConfigDirOverride = "/etc/rl" }, ""},
		{"bad header when enabled", func(s *Settings) { s.LimitResponseHeadersEnabled = true; s.LimitResetHeader = "Rate Limit" }, "LIMIT_RESET_HEADER"},
		{"bad header when disabled", func(s *Settings) { s.LimitResetHeader = "" }, ""},
		{"lease key", func(s *Settings) { s.LeaseSigningKey = strings.Repeat("k", 32) }, ""},
		{"short lease key", func(s *Settings) { s.LeaseSigningKey = "short" }, "LEASE_SIGNING_KEY is 5 bytes, want at least 32"},
		{"short previous lease key", func(s *Settings) {
			s.LeaseSigningKey, s.LeaseSigningKeyPrevious = strings.Repeat("k", 32), strings.Repeat("p", 32)+",short"
		}, "LEASE_SIGNING_KEY_PREVIOUS key 2 is 5 bytes"},
		{"lease key and file", func(s *Settings) { s.LeaseSigningKey, s.LeaseSigningKeyFile = strings.Repeat("k", 32), "/keys" }, "LEASE_SIGNING_KEY and LEASE_SIGNING_KEY_FILE are both set"},
		{"previous lease keys and file", func(s *Settings) { s.LeaseSigningKeyPrevious, s.LeaseSigningKeyFile = strings.Repeat("p", 32), "/keys" }, "LEASE_SIGNING_KEY_PREVIOUS goes with LEASE_SIGNING_KEY"},
		{"previous lease keys alone", func(s *Settings) { s.LeaseSigningKeyPrevious = strings.Repeat("p", 32) }, "LEASE_SIGNING_KEY_PREVIOUS is set but LEASE_SIGNING_KEY is not"},
		{"lease key file", func(s *Settings) { s.LeaseSigningKeyFile = "/keys" }, ""},
		{"zero lease ttl", func(s *Settings) { s.LeaseTTL = 0 }, "LEASE_TTL=0s: want a duration in (0,24h0m0s]"},
		{"negative lease ttl", func(s *Settings) { s.LeaseTTL = -time.Second }, "LEASE_TTL"},
		{"lease ttl of a day", func(s *Settings) { s.LeaseTTL = 24 * time.Hour }, ""},
		{"lease ttl past a day", func(s *Settings) { s.LeaseTTL = 24*time.Hour + time.Millisecond }, "LEASE_TTL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := Defaults()
			tt.mod(&s)
			err := s.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("Validate() = %v, want an error containing %q", err, tt.want)
			case err != nil && !strings.HasPrefix(err.Error(), "config: "):
				t.Errorf("Validate() = %q, want it prefixed with config:", err)
			}
		})
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	s := Defaults()
	s.Port, s.NearLimitRatio, s.BackendType = -5, 2, "cassandra"
	err := s.Validate()
	for _, want := range []string{"PORT", "NEAR_LIMIT_RATIO", "BACKEND_TYPE"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to name %s", err, want)
		}
	}
}

func TestMarkdownTable(t *testing.T) {
	md := MarkdownTable()
	lines := strings.Split(strings.TrimSuffix(md, "\n"), "\n")
	if want := len(Table()) + len(Unbound()) + 2; len(lines) != want {
		t.Fatalf("MarkdownTable() has %d lines, want %d", len(lines), want)
	}
	for _, want := range []string{
		"| `GRPC_PORT` | `8081` | gRPC listener port. | same |",
		"| `RUNTIME_SUBDIRECTORY` | \"\" | Subdirectory of RUNTIME_ROOT. | same |",
		"| `BACKEND_TIMEOUT` | `15ms` |",
		"| `REDIS_URL` | \"\" |",
		"| `REDIS_TIMEOUT` | `1s` |",
		"| `REDIS_PIPELINE_LIMIT, REDIS_PERSECOND_PIPELINE_LIMIT` | |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("MarkdownTable() lacks row %q", want)
		}
	}
	for i, l := range lines {
		if strings.Count(l, "|")-strings.Count(l, `\|`) != 5 {
			t.Errorf("MarkdownTable() line %d = %q, want 4 cells", i, l)
		}
	}
}

func BenchmarkFromEnv(b *testing.B) {
	b.ReportAllocs()
	m := map[string]string{"GRPC_PORT": "9000", "BACKEND_TYPE": "dynamodb", "BACKEND_TIMEOUT": "10ms"}
	getenv := env(m)
	for b.Loop() {
		if _, err := FromEnv(getenv); err != nil {
			b.Fatal(err)
		}
	}
}
