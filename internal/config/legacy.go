package config

import (
	"fmt"
	"sort"
	"strings"
)

// How a setting compares with envoyproxy/ratelimit's setting of the same
// name (the fourth column of the settings table of docs/settings.md).
const (
	// CompatSame: read with the same meaning.
	CompatSame = "same"
	// CompatExtended: the same meaning, with more accepted or done.
	CompatExtended = "extended"
	// CompatRefused: a value this service cannot honour stops the start,
	// with a message saying what to use instead.
	CompatRefused = "refused"
	// CompatIgnored: it configures a part this service does not have; set,
	// it is named in one warning at start.
	CompatIgnored = "ignored"
)

// compatBound says, for each bound setting that envoyproxy/ratelimit
// (commit f2fb157) also reads, how the two compare. Bound settings missing
// here are this service's own.
var compatBound = map[string]string{
	"HOST": CompatSame, "PORT": CompatSame, "DEBUG_HOST": CompatSame, "DEBUG_PORT": CompatSame,
	"GRPC_UDS": CompatSame, "GRPC_HOST": CompatSame, "GRPC_PORT": CompatSame,
	"GRPC_MAX_CONNECTION_AGE": CompatSame, "GRPC_MAX_CONNECTION_AGE_GRACE": CompatSame,
	"GRPC_SERVER_USE_TLS": CompatSame, "GRPC_SERVER_TLS_CERT": CompatExtended, "GRPC_SERVER_TLS_KEY": CompatExtended,
	"GRPC_CLIENT_TLS_CACERT": CompatExtended, "GRPC_CLIENT_TLS_SAN": CompatSame,
	"LOG_LEVEL": CompatSame + " (default info, there WARN)", "LOG_FORMAT": CompatSame + " (default json, there text)",
	"FORCE_START_WITHOUT_INITIAL_CONFIG":      CompatSame,
	"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": CompatSame,
	"USE_STATSD": CompatSame + " (default false, there true)", "STATSD_HOST": CompatSame, "STATSD_PORT": CompatSame,
	"STATSD_PROTOCOL": CompatSame, "EXTRA_TAGS": CompatSame, "STATS_FLUSH_INTERVAL": CompatSame, "DISABLE_STATS": CompatSame,
	"USE_PROMETHEUS": CompatExtended, "PROMETHEUS_ADDR": CompatSame, "PROMETHEUS_PATH": CompatSame,
	"PROMETHEUS_MAPPER_YAML": CompatExtended, "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS": CompatSame,
	"RUNTIME_ROOT": CompatSame, "RUNTIME_SUBDIRECTORY": CompatSame, "RUNTIME_APPDIRECTORY": CompatSame,
	"RUNTIME_IGNOREDOTFILES": CompatSame, "RUNTIME_WATCH_ROOT": CompatSame,
	"NEAR_LIMIT_RATIO": CompatSame, "BACKEND_TYPE": CompatRefused + " (memcache; unset, redis only with REDIS_URL set)",
	"LIMIT_RESPONSE_HEADERS_ENABLED": CompatSame, "LIMIT_LIMIT_HEADER": CompatSame,
	"LIMIT_REMAINING_HEADER": CompatSame, "LIMIT_RESET_HEADER": CompatSame,
	"SHADOW_MODE": CompatSame, "QUOTA_MODE": CompatSame, "RESPONSE_DYNAMIC_METADATA": CompatSame,
	"MERGE_DOMAIN_CONFIG": CompatSame,

	// Read by the configuration-over-xDS and tracing parts once they bind
	// them; until then they are unbound and listed in legacy below.
	"CONFIG_TYPE":                   CompatSame,
	"CONFIG_GRPC_XDS_NODE_ID":       CompatSame,
	"CONFIG_GRPC_XDS_NODE_METADATA": CompatSame, "CONFIG_GRPC_XDS_SERVER_URL": CompatSame,
	"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL": CompatSame, "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": CompatSame,
	"CONFIG_GRPC_XDS_SERVER_USE_TLS": CompatSame, "CONFIG_GRPC_XDS_CLIENT_TLS_CERT": CompatSame,
	"CONFIG_GRPC_XDS_CLIENT_TLS_KEY": CompatSame, "CONFIG_GRPC_XDS_SERVER_TLS_CACERT": CompatSame,
	"CONFIG_GRPC_XDS_SERVER_TLS_SAN": CompatSame, "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": CompatSame,
	"XDS_CLIENT_BACKOFF_MAX_INTERVAL": CompatSame, "XDS_CLIENT_BACKOFF_RANDOM_FACTOR": CompatSame,
	"XDS_CLIENT_BACKOFF_JITTER": CompatSame, "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES": CompatSame,
	"TRACING_ENABLED": CompatSame, "TRACING_SERVICE_NAME": CompatSame, "TRACING_SERVICE_NAMESPACE": CompatSame,
	"TRACING_SERVICE_INSTANCE_ID": CompatSame, "TRACING_EXPORTER_PROTOCOL": CompatSame, "TRACING_SAMPLING_RATE": CompatSame,

	"REDIS_SOCKET_TYPE": CompatSame + " (default tcp, there unix)", "REDIS_TYPE": CompatSame,
	"REDIS_URL":  CompatExtended + " (redis:// and rediss:// URLs; no default, there a twemproxy socket)",
	"REDIS_AUTH": CompatSame, "REDIS_SENTINEL_AUTH": CompatSame, "REDIS_TLS": CompatSame, "REDIS_TLS_CACERT": CompatSame,
	"REDIS_TLS_CLIENT_CERT": CompatSame, "REDIS_TLS_CLIENT_KEY": CompatSame,
	"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION": CompatSame,
	"REDIS_POOL_SIZE":                      CompatSame + " (dedicated connections: calls are pipelined)",
	"REDIS_PIPELINE_WINDOW":                CompatExtended + " (every REDIS_TYPE, there cluster only)",
	"REDIS_TIMEOUT":                        CompatExtended + " (bounds writes and answers too; default 1s, there 10s)",
	"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION": CompatSame, "REDIS_POOL_ON_EMPTY_BEHAVIOR": CompatSame + " (WAIT only, as there)",
	"REDIS_STARTUP_INITIAL_INTERVAL": CompatSame, "REDIS_STARTUP_MAX_INTERVAL": CompatSame, "REDIS_STARTUP_MAX_ELAPSED_TIME": CompatSame,
	"REDIS_PERSECOND": CompatSame, "REDIS_PERSECOND_SOCKET_TYPE": CompatSame + " (default tcp, there unix)",
	"REDIS_PERSECOND_TYPE": CompatSame, "REDIS_PERSECOND_URL": CompatExtended + " (as REDIS_URL)",
	"REDIS_PERSECOND_AUTH": CompatSame, "REDIS_PERSECOND_SENTINEL_AUTH": CompatSame, "REDIS_PERSECOND_TLS": CompatSame,
	"REDIS_PERSECOND_POOL_SIZE":              CompatSame + " (as REDIS_POOL_SIZE)",
	"REDIS_PERSECOND_PIPELINE_WINDOW":        CompatExtended + " (as REDIS_PIPELINE_WINDOW)",
	"REDIS_PERSECOND_TIMEOUT":                CompatExtended + " (as REDIS_TIMEOUT)",
	"REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR": CompatSame + " (WAIT only, as there)",
}

// legacySetting is a setting of envoyproxy/ratelimit that this service does
// not bind. row groups settings into one row of the settings table (docs/settings.md).
type legacySetting struct {
	row    string
	compat string
	help   string
	// refuse, when set, returns why a value cannot be honoured.
	refuse func(value string) error
}

var (
	// The Redis settings no binding reads (the others are bound: redis.go).
	redisPipelineLimit    = []string{"REDIS_PIPELINE_LIMIT", "REDIS_PERSECOND_PIPELINE_LIMIT"}
	redisClusterParallels = []string{"REDIS_CLUSTER_PIPELINE_PARALLELISM", "REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM"}
	memcacheSettings      = []string{
		"MEMCACHE_HOST_PORT", "MEMCACHE_MAX_IDLE_CONNS", "MEMCACHE_SRV", "MEMCACHE_SRV_REFRESH",
		"MEMCACHE_TLS", "MEMCACHE_TLS_CLIENT_CERT", "MEMCACHE_TLS_CLIENT_KEY", "MEMCACHE_TLS_CACERT",
		"MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION",
	}
	xdsSettings = []string{
		"CONFIG_GRPC_XDS_NODE_ID", "CONFIG_GRPC_XDS_NODE_METADATA", "CONFIG_GRPC_XDS_SERVER_URL",
		"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
		"CONFIG_GRPC_XDS_SERVER_USE_TLS", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
		"CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT",
		"CONFIG_GRPC_XDS_SERVER_TLS_SAN", "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL",
		"XDS_CLIENT_BACKOFF_MAX_INTERVAL", "XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
		"XDS_CLIENT_BACKOFF_JITTER", "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES",
	}
	tracingSettings = []string{
		"TRACING_ENABLED", "TRACING_SERVICE_NAME", "TRACING_SERVICE_NAMESPACE",
		"TRACING_SERVICE_INSTANCE_ID", "TRACING_EXPORTER_PROTOCOL", "TRACING_SAMPLING_RATE",
	}
)

// legacy lists every setting of envoyproxy/ratelimit (commit f2fb157) that
// no binding reads, by name. A name that a binding reads is not looked up
// here.
var legacy = func() map[string]legacySetting {
	m := map[string]legacySetting{}
	group := func(names []string, l legacySetting) {
		for _, n := range names {
			m[n] = l
		}
	}
	group(redisPipelineLimit, legacySetting{row: strings.Join(redisPipelineLimit, ", "), compat: CompatIgnored,
		help: "Most commands per pipelined write: envoyproxy/ratelimit ignores it too since radix v4. Here the client writes every command queued at each flush; REDIS_PIPELINE_WINDOW sets how long it gathers them."})
	group(redisClusterParallels, legacySetting{row: strings.Join(redisClusterParallels, ", "), compat: CompatIgnored,
		help: "Pipeline groups sent at once to a cluster: the client sends the commands of different slots to their nodes concurrently by itself."})
	group(memcacheSettings, legacySetting{row: "MEMCACHE_*", compat: CompatIgnored,
		help: "Memcache connection settings: there is no memcache here (BACKEND_TYPE=memory, dynamodb or redis)."})
	group(xdsSettings, legacySetting{row: "CONFIG_GRPC_XDS_*, XDS_CLIENT_*", compat: CompatIgnored,
		help: "Configuration over xDS; read only with CONFIG_TYPE=GRPC_XDS_SOTW."})
	group(tracingSettings, legacySetting{row: "TRACING_*", compat: CompatIgnored,
		help: "OpenTelemetry tracing."})
	m["CONFIG_TYPE"] = legacySetting{row: "CONFIG_TYPE", compat: CompatRefused,
		help: "Where the descriptor configuration comes from: FILE (the RUNTIME_* directory).",
		refuse: func(v string) error {
			if strings.EqualFold(v, "FILE") {
				return nil
			}
			return fmt.Errorf("only FILE is served by this build: put the descriptor YAML under RUNTIME_ROOT or CONFIG_DIR")
		}}
	m["USE_DOG_STATSD"] = legacySetting{row: "USE_DOG_STATSD", compat: CompatRefused,
		help: "DogStatsD emission: true is refused; use USE_STATSD with STATSD_PROTOCOL=udp (a DogStatsD agent reads plain statsd) or USE_PROMETHEUS.",
		refuse: func(v string) error {
			var b boolValue
			if b.Set(v) == nil && !bool(b) {
				return nil
			}
			return fmt.Errorf("DogStatsD is not emitted here: use USE_STATSD=true with STATSD_PROTOCOL=udp (a DogStatsD agent reads plain statsd, tags as EXTRA_TAGS) or USE_PROMETHEUS=true")
		}}
	m["USE_DOG_STATSD_MOGRIFIERS"] = legacySetting{row: "USE_DOG_STATSD_MOGRIFIERS", compat: CompatIgnored,
		help: "DogStatsD name rewriting; see USE_DOG_STATSD."}
	m["EXPIRATION_JITTER_MAX_SECONDS"] = legacySetting{row: "EXPIRATION_JITTER_MAX_SECONDS", compat: CompatIgnored,
		help: "Redis key expiry jitter: buckets here expire once full again."}
	m["LOCAL_CACHE_SIZE_IN_BYTES"] = legacySetting{row: "LOCAL_CACHE_SIZE_IN_BYTES", compat: CompatIgnored,
		help: "Local over-limit cache: see REJECTION_CACHE_SIZE."}
	m["CACHE_KEY_PREFIX"] = legacySetting{row: "CACHE_KEY_PREFIX", compat: CompatIgnored,
		help: "Redis key prefix: deployments sharing a DynamoDB table or a Redis are kept apart by NAMESPACE, which prefixes every key."}
	m["STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT"] = legacySetting{row: "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", compat: CompatIgnored,
		help: "Always so here: a refused request debits no bucket (all-or-nothing)."}
	return m
}()

// legacyValueError returns why value cannot be honoured for a bound
// setting whose envoyproxy/ratelimit values this service lacks, or nil.
func legacyValueError(name, value string) error {
	if name == "BACKEND_TYPE" && strings.EqualFold(strings.TrimSpace(value), "memcache") {
		return fmt.Errorf("there is no memcache backend here: use memory (one replica, the default), redis (a fleet sharing one Redis; see REDIS_URL) or dynamodb (a fleet sharing one table; see DYNAMODB_TABLE and AWS_REGION)")
	}
	return nil
}

// CheckLegacy looks up, through getenv, every setting of envoyproxy/ratelimit
// that no binding reads. A value that cannot be honoured is an error naming
// the setting and what to use instead (all such errors together); the names
// of the others that are set are returned, sorted, for one warning at start,
// with the REDIS_* settings that are set while the environment selects
// another store than Redis (BACKEND_TYPE=memory or dynamodb).
func CheckLegacy(getenv func(string) string) (ignored []string, err error) {
	bound := map[string]bool{}
	var s Settings
	backend, _ := envBackend(getenv)
	for _, b := range bindings(&s) {
		bound[b.name] = true
		if backend != BackendRedis && isRedisSetting(b.name) && getenv(b.name) != "" {
			ignored = append(ignored, b.name)
		}
	}
	var errs []string
	for name, l := range legacy {
		if bound[name] {
			continue
		}
		v := getenv(name)
		if v == "" {
			continue
		}
		if l.refuse != nil {
			if e := l.refuse(v); e != nil {
				errs = append(errs, fmt.Sprintf("config: %s=%q: %v", name, v, e))
			}
			continue
		}
		ignored = append(ignored, name)
	}
	sort.Strings(ignored)
	sort.Strings(errs)
	if len(errs) > 0 {
		return ignored, fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return ignored, nil
}

// compatOf returns the compatibility column of a bound setting: how it
// compares with envoyproxy/ratelimit's, or "—" for this service's own.
func compatOf(name string) string {
	if c, ok := compatBound[name]; ok {
		return c
	}
	return "—"
}

// Unbound describes, one row per group, the settings of envoyproxy/ratelimit
// that no binding reads, for the settings table (docs/settings.md).
func Unbound() []Var {
	bound := map[string]bool{}
	var s Settings
	for _, b := range bindings(&s) {
		bound[b.name] = true
	}
	seen := map[string]bool{}
	var rows []Var
	for _, names := range [][]string{{"CONFIG_TYPE"}, xdsSettings, tracingSettings, {"USE_DOG_STATSD", "USE_DOG_STATSD_MOGRIFIERS"},
		{"EXPIRATION_JITTER_MAX_SECONDS", "LOCAL_CACHE_SIZE_IN_BYTES", "CACHE_KEY_PREFIX", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT"},
		redisPipelineLimit, redisClusterParallels, memcacheSettings} {
		for _, n := range names {
			l := legacy[n]
			if bound[n] || seen[l.row] {
				continue
			}
			seen[l.row] = true
			rows = append(rows, Var{Name: l.row, Help: l.help, Compat: l.compat})
		}
	}
	return rows
}
