package config

import (
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/dynalimit/dynalimit/internal/lease"
	"github.com/dynalimit/dynalimit/internal/memstore"
	"github.com/dynalimit/dynalimit/internal/redisclient"
	"github.com/dynalimit/dynalimit/internal/rlqs"
	"github.com/dynalimit/dynalimit/internal/server"
	"github.com/dynalimit/dynalimit/internal/service"
	"github.com/dynalimit/dynalimit/pkg/descriptors"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
)

// Values of the enumerated settings. FromEnv and the flags accept them in any
// case and store them lower-cased.
const (
	LogFormatJSON = "json" // LOG_FORMAT: one JSON object per line
	LogFormatText = "text" // LOG_FORMAT: logrus' text formatter

	BackendMemory   = "memory"   // BACKEND_TYPE: the embedded in-memory store
	BackendDynamoDB = "dynamodb" // BACKEND_TYPE: the DynamoDB store
	BackendRedis    = "redis"    // BACKEND_TYPE: the Redis store (REDIS_*)

	ConfigTypeFile = "file"          // CONFIG_TYPE: descriptor YAML files under RUNTIME_ROOT or CONFIG_DIR
	ConfigTypeXDS  = "grpc_xds_sotw" // CONFIG_TYPE: descriptor configuration pushed over xDS

	TracingHTTP = "http" // TRACING_EXPORTER_PROTOCOL: OTLP over HTTP
	TracingGRPC = "grpc" // TRACING_EXPORTER_PROTOCOL: OTLP over gRPC

	OnUnavailableAllow = "allow" // ON_UNAVAILABLE: admit when the store fails
	OnUnavailableBlock = "block" // ON_UNAVAILABLE: refuse when the store fails
	OnUnavailableLocal = "local" // ON_UNAVAILABLE: decide on this replica's share when the shared store fails

	HitsAddendCharge  = "charge"  // DESCRIPTOR_HITS_ADDEND: a descriptor's own hits land even past zero
	HitsAddendConsume = "consume" // DESCRIPTOR_HITS_ADDEND: a descriptor's own hits are all-or-nothing

	StatsdTCP = "tcp" // STATSD_PROTOCOL: statsd over TCP (envoyproxy/ratelimit's default)
	StatsdUDP = "udp" // STATSD_PROTOCOL: statsd over UDP

	MetadataRatelimit = "ratelimit" // RESPONSE_DYNAMIC_METADATA_FORMAT: envoyproxy/ratelimit's shape
	MetadataExtended  = "extended"  // RESPONSE_DYNAMIC_METADATA_FORMAT: with quota-mode fields and structured overrides
)

// Settings is the service's configuration: one field per environment
// variable, named in each field's comment. The zero value is not useful;
// start from Defaults or FromEnv.
type Settings struct {
	Host       string // HOST: HTTP listener address (/healthcheck, /json)
	Port       int    // PORT: HTTP listener port
	GRPCHost   string // GRPC_HOST: gRPC listener address (rate limit, health, reflection)
	GRPCPort   int    // GRPC_PORT: gRPC listener port
	GRPCUDS    string // GRPC_UDS: unix socket path for gRPC instead of GRPC_HOST:GRPC_PORT
	DebugHost  string // DEBUG_HOST: debug listener address (/metrics, /rlconfig, pprof)
	DebugPort  int    // DEBUG_PORT: debug listener port
	DebugPprof bool   // DEBUG_PPROF: serve pprof on the debug listener
	AdminAPI   bool   // ADMIN_API: serve the admin API on the debug listener

	RuntimeRoot           string // RUNTIME_ROOT: root of the runtime data
	RuntimeSubdirectory   string // RUNTIME_SUBDIRECTORY: subdirectory under RUNTIME_ROOT
	RuntimeAppDirectory   string // RUNTIME_APPDIRECTORY: directory holding the descriptor YAML
	RuntimeIgnoreDotFiles bool   // RUNTIME_IGNOREDOTFILES: skip files whose names start with a dot
	RuntimeWatchRoot      bool   // RUNTIME_WATCH_ROOT: watch RUNTIME_ROOT rather than the config directory
	ConfigDirOverride     string // CONFIG_DIR: descriptor directory; overrides the RUNTIME_* path
	MergeDomainConfig     bool   // MERGE_DOMAIN_CONFIG: merge files that declare the same domain

	HealthyWithAtLeastOneConfigLoaded bool // HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED: NOT_SERVING until a config with a domain is loaded
	ForceStartWithoutInitialConfig    bool // FORCE_START_WITHOUT_INITIAL_CONFIG: serve (every answer OK) when the first load fails

	ConfigType              string        // CONFIG_TYPE: file or grpc_xds_sotw
	XDSNodeID               string        // CONFIG_GRPC_XDS_NODE_ID: node id sent to the xDS server
	XDSNodeMetadata         string        // CONFIG_GRPC_XDS_NODE_METADATA: node metadata, key=value,…
	XDSServerURL            string        // CONFIG_GRPC_XDS_SERVER_URL: xDS management server, host:port
	XDSConnectRetryInterval time.Duration // CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL: reconnect interval while unreachable
	XDSHeaders              string        // CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS: gRPC metadata, key:value,…
	XDSServerUseTLS         bool          // CONFIG_GRPC_XDS_SERVER_USE_TLS: connect to the xDS server over TLS
	XDSClientTLSCert        string        // CONFIG_GRPC_XDS_CLIENT_TLS_CERT: client certificate (PEM file)
	XDSClientTLSKey         string        // CONFIG_GRPC_XDS_CLIENT_TLS_KEY: client key (PEM file)
	XDSServerTLSCACert      string        // CONFIG_GRPC_XDS_SERVER_TLS_CACERT: CA verifying the xDS server (PEM file)
	XDSServerTLSSAN         string        // CONFIG_GRPC_XDS_SERVER_TLS_SAN: name the xDS server's certificate must carry
	XDSBackoffInitial       time.Duration // XDS_CLIENT_BACKOFF_INITIAL_INTERVAL: first wait before a new stream
	XDSBackoffMax           time.Duration // XDS_CLIENT_BACKOFF_MAX_INTERVAL: longest wait before a new stream
	XDSBackoffRandomFactor  float64       // XDS_CLIENT_BACKOFF_RANDOM_FACTOR: jitter fraction
	XDSBackoffJitter        bool          // XDS_CLIENT_BACKOFF_JITTER: jitter the waits
	XDSMaxMsgSize           int           // XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES: largest xDS response; 0 means gRPC's 4 MiB

	TracingEnabled           bool    // TRACING_ENABLED: export OpenTelemetry traces
	TracingServiceName       string  // TRACING_SERVICE_NAME: service.name
	TracingServiceNamespace  string  // TRACING_SERVICE_NAMESPACE: service.namespace
	TracingServiceInstanceID string  // TRACING_SERVICE_INSTANCE_ID: service.instance.id; empty means a random UUID
	TracingExporterProtocol  string  // TRACING_EXPORTER_PROTOCOL: http or grpc
	TracingSamplingRate      float64 // TRACING_SAMPLING_RATE: fraction of root traces sampled

	LogLevel  string // LOG_LEVEL: logrus level (trace, debug, info, warn, error, fatal, panic)
	LogFormat string // LOG_FORMAT: json or text

	BackendType string // BACKEND_TYPE: memory, dynamodb or redis
	// BackendInferred reports that BACKEND_TYPE was unset and REDIS_URL
	// set, so that the store is Redis (as Envoy Gateway runs the
	// service): the start's log line says so. Setting BACKEND_TYPE (a
	// flag too) clears it.
	BackendInferred bool
	ShadowMode      bool    // SHADOW_MODE: decide and record, but always answer OK
	QuotaMode       bool    // QUOTA_MODE: every rule is in quota mode
	NearLimitRatio  float64 // NEAR_LIMIT_RATIO: fraction of a limit counted as near the limit, in (0,1]

	DescriptorHitsAddend string // DESCRIPTOR_HITS_ADDEND: charge or consume, how a descriptor's own hits_addend debits

	LimitResponseHeadersEnabled bool   // LIMIT_RESPONSE_HEADERS_ENABLED: add rate-limit headers to responses
	LimitLimitHeader            string // LIMIT_LIMIT_HEADER: header carrying the limit
	LimitRemainingHeader        string // LIMIT_REMAINING_HEADER: header carrying the remaining count
	LimitResetHeader            string // LIMIT_RESET_HEADER: header carrying the seconds until reset
	ResponseDynamicMetadata     bool   // RESPONSE_DYNAMIC_METADATA: return the request in dynamic_metadata
	ResponseMetadataFormat      string // RESPONSE_DYNAMIC_METADATA_FORMAT: ratelimit or extended

	RequestMaxDescriptors int // REQUEST_MAX_DESCRIPTORS: most descriptors per request
	RequestMaxEntries     int // REQUEST_MAX_ENTRIES: most entries per descriptor
	RequestMaxEntryBytes  int // REQUEST_MAX_ENTRY_BYTES: longest domain, key or value in bytes

	GRPCServerUseTLS                 bool          // GRPC_SERVER_USE_TLS: serve gRPC over TLS
	GRPCServerTLSCert                string        // GRPC_SERVER_TLS_CERT: server certificate chain (PEM file)
	GRPCServerTLSKey                 string        // GRPC_SERVER_TLS_KEY: server private key (PEM file)
	GRPCClientTLSCACert              string        // GRPC_CLIENT_TLS_CACERT: client CA bundle; when set, client certificates are required
	GRPCClientTLSSAN                 string        // GRPC_CLIENT_TLS_SAN: a SAN every client certificate must carry
	GRPCMaxConnectionAge             time.Duration // GRPC_MAX_CONNECTION_AGE: connections are sent GOAWAY after this age
	GRPCMaxConnectionAgeGrace        time.Duration // GRPC_MAX_CONNECTION_AGE_GRACE: then closed after this grace
	GRPCTransport                    string        // GRPC_TRANSPORT: native or grpc-go
	GRPCMaxConcurrentStreams         int           // GRPC_MAX_CONCURRENT_STREAMS: calls one connection holds at once
	GRPCMaxConnectionIdle            time.Duration // GRPC_MAX_CONNECTION_IDLE: connections with no call this long are sent GOAWAY
	GRPCKeepaliveTime                time.Duration // GRPC_KEEPALIVE_TIME: a connection silent this long is pinged
	GRPCKeepaliveTimeout             time.Duration // GRPC_KEEPALIVE_TIMEOUT: then closed if nothing comes within this; also bounds a stalled write
	GRPCKeepaliveMinTime             time.Duration // GRPC_KEEPALIVE_ENFORCEMENT_MIN_TIME: clients pinging more often are sent GOAWAY too_many_pings
	GRPCKeepalivePermitWithoutStream bool          // GRPC_KEEPALIVE_ENFORCEMENT_PERMIT_WITHOUT_STREAM: allow pings while no call is open

	HTTPReadHeaderTimeout time.Duration // HTTP_READ_HEADER_TIMEOUT: HTTP and debug: time to send a request's headers
	HTTPReadTimeout       time.Duration // HTTP_READ_TIMEOUT: HTTP and debug: time to send a whole request
	HTTPIdleTimeout       time.Duration // HTTP_IDLE_TIMEOUT: HTTP and debug: idle kept-alive connections are closed after it
	HTTPMaxConnections    int           // HTTP_MAX_CONNECTIONS: connections each of HTTP and debug holds; 0 derives it from the open-file limit

	UsePrometheus                        bool          // USE_PROMETHEUS: serve metrics on PROMETHEUS_ADDR too
	PrometheusAddr                       string        // PROMETHEUS_ADDR: address of that listener
	PrometheusPath                       string        // PROMETHEUS_PATH: its metrics path
	PrometheusMapperYAML                 string        // PROMETHEUS_MAPPER_YAML: statsd-exporter mapping file for the compatible metrics
	PrometheusResponseTimeAsMilliseconds bool          // PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS: default mapping keeps response time in ms
	UseStatsd                            bool          // USE_STATSD: send the compatible stats to a statsd server
	StatsdHost                           string        // STATSD_HOST: statsd server host
	StatsdPort                           int           // STATSD_PORT: statsd server port
	StatsdProtocol                       string        // STATSD_PROTOCOL: tcp or udp
	ExtraTags                            string        // EXTRA_TAGS: tags added to every statsd stat (key:value,…; see ExtraTagMap)
	StatsFlushInterval                   time.Duration // STATS_FLUSH_INTERVAL: how often counters are flushed
	DisableStats                         bool          // DISABLE_STATS: no compatible stats at all

	RLQSAssignmentTTL       time.Duration // RLQS_ASSIGNMENT_TTL: time to live of each RLQS assignment
	RLQSAbandonAfter        time.Duration // RLQS_ABANDON_AFTER: an RLQS bucket with no demand this long is abandoned
	RLQSMaxBucketsPerStream int           // RLQS_MAX_BUCKETS_PER_STREAM: most buckets one RLQS stream watches
	RLQSMaxStreamBytes      int           // RLQS_MAX_STREAM_BYTES: most bytes of bucket ids one RLQS stream watches

	ShutdownDrain   time.Duration // SHUTDOWN_DRAIN: time spent NOT_SERVING before stopping
	ShutdownTimeout time.Duration // SHUTDOWN_TIMEOUT: GracefulStop deadline, then Stop

	MemoryMaxBuckets    int           // MEMORY_MAX_BUCKETS: bucket count bound of the memory store
	MemoryMaxBytes      int           // MEMORY_MAX_BYTES: memory bound of the memory store, in bytes
	MemorySweepInterval time.Duration // MEMORY_SWEEP_INTERVAL: how often the memory store drops full buckets

	OnUnavailable  string        // ON_UNAVAILABLE: local, allow or block when the store fails
	FleetSize      int           // FLEET_SIZE: replicas sharing the store (0: counted by heartbeats)
	BackendTimeout time.Duration // BACKEND_TIMEOUT: budget of one store decision
	// BackendWarmupTimeout (BACKEND_WARMUP_TIMEOUT) bounds one attempt of the
	// DynamoDB store's warm-up at start, after which what failed is logged
	// and the warm-up starts over; health waits for it.
	BackendWarmupTimeout time.Duration

	DynamoDBTable      string        // DYNAMODB_TABLE: table name
	DynamoDBEndpoint   string        // DYNAMODB_ENDPOINT: endpoint URL; empty means AWS
	AWSRegion          string        // AWS_REGION: region of the table
	Namespace          string        // NAMESPACE: storage namespace
	ConfigCacheTTL     time.Duration // CONFIG_CACHE_TTL: lifetime of cached stored limit configs
	RejectionCacheSize int           // REJECTION_CACHE_SIZE: entries in the over-limit cache; 0 disables it
	UsageRetention     time.Duration // USAGE_RETENTION: how long usage snapshots live past their window
	ShardWriteRate     float64       // SHARD_WRITE_RATE: writes/s per item at which a bucket doubles its shards; 0 disables it
	ShardMergeRate     float64       // SHARD_MERGE_RATE: writes/s per item below which a sharded bucket merges; 0 disables it
	ShardMergeAfter    time.Duration // SHARD_MERGE_AFTER: how long a bucket stays below SHARD_MERGE_RATE before it merges

	LeaseSigningKey         string        // LEASE_SIGNING_KEY: key signing leases (never printed)
	LeaseSigningKeyPrevious string        // LEASE_SIGNING_KEY_PREVIOUS: keys still verifying leases, comma-separated (never printed)
	LeaseSigningKeyFile     string        // LEASE_SIGNING_KEY_FILE: file of keys shared by every replica
	LeaseTTL                time.Duration // LEASE_TTL: how long a lease settles

	// The Redis store's connection (BACKEND_TYPE=redis), under
	// envoyproxy/ratelimit's names; RedisOptions hands them to
	// redisclient.Open.
	RedisSocketType                   string        // REDIS_SOCKET_TYPE: tcp or unix
	RedisType                         string        // REDIS_TYPE: single, sentinel or cluster
	RedisURL                          string        // REDIS_URL: address(es), see redisclient
	RedisAuth                         string        // REDIS_AUTH: password or user:password (never printed)
	RedisSentinelAuth                 string        // REDIS_SENTINEL_AUTH: the sentinels' password or user:password (never printed)
	RedisTLS                          bool          // REDIS_TLS: connect over TLS
	RedisTLSCACert                    string        // REDIS_TLS_CACERT: CA bundle (PEM file) added to the system's roots
	RedisTLSClientCert                string        // REDIS_TLS_CLIENT_CERT: client certificate (PEM file)
	RedisTLSClientKey                 string        // REDIS_TLS_CLIENT_KEY: client key (PEM file)
	RedisTLSSkipHostnameVerification  bool          // REDIS_TLS_SKIP_HOSTNAME_VERIFICATION: verify the chain, not the name
	RedisPoolSize                     int           // REDIS_POOL_SIZE: dedicated connections per node
	RedisPipelineWindow               time.Duration // REDIS_PIPELINE_WINDOW: longest wait gathering commands into one write
	RedisTimeout                      time.Duration // REDIS_TIMEOUT: dial, write and answer bound of a connection
	RedisHealthCheckActiveConnection  bool          // REDIS_HEALTH_CHECK_ACTIVE_CONNECTION: NOT_SERVING while no connection is open
	RedisPoolOnEmptyBehavior          string        // REDIS_POOL_ON_EMPTY_BEHAVIOR: wait (create and error are refused)
	RedisStartupInitialInterval       time.Duration // REDIS_STARTUP_INITIAL_INTERVAL: first wait between attempts to connect at start
	RedisStartupMaxInterval           time.Duration // REDIS_STARTUP_MAX_INTERVAL: longest wait between them
	RedisStartupMaxElapsed            time.Duration // REDIS_STARTUP_MAX_ELAPSED_TIME: give up after this; 0 never
	RedisPerSecond                    bool          // REDIS_PERSECOND: a second Redis for the per-second limits
	RedisPerSecondSocketType          string        // REDIS_PERSECOND_SOCKET_TYPE
	RedisPerSecondType                string        // REDIS_PERSECOND_TYPE
	RedisPerSecondURL                 string        // REDIS_PERSECOND_URL
	RedisPerSecondAuth                string        // REDIS_PERSECOND_AUTH (never printed)
	RedisPerSecondSentinelAuth        string        // REDIS_PERSECOND_SENTINEL_AUTH (never printed)
	RedisPerSecondTLS                 bool          // REDIS_PERSECOND_TLS
	RedisPerSecondPoolSize            int           // REDIS_PERSECOND_POOL_SIZE
	RedisPerSecondPipelineWindow      time.Duration // REDIS_PERSECOND_PIPELINE_WINDOW
	RedisPerSecondTimeout             time.Duration // REDIS_PERSECOND_TIMEOUT
	RedisPerSecondPoolOnEmptyBehavior string        // REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR
}

// Var describes one setting for documentation: its environment variable,
// its default as the environment would spell it, and what it does.
type Var struct {
	Name    string
	Default string
	Help    string
	// Compat says how the setting compares with envoyproxy/ratelimit's of
	// the same name (CompatSame, …), or "—" when it has none.
	Compat string
}

// Defaults returns the settings used when no variable is set. It is the
// only place the binary's defaults are written down; those that the
// libraries also apply (the DynamoDB store's, the embedded store's, the
// service's request bounds, headers and near-limit ratio, the HTTP
// servers' timeouts) are their exported constants, so that one change
// changes both.
func Defaults() Settings {
	s := Settings{
		Host:      "0.0.0.0",
		Port:      8080,
		GRPCHost:  "0.0.0.0",
		GRPCPort:  8081,
		DebugHost: "0.0.0.0",
		DebugPort: 6070,

		RuntimeRoot:         "/srv/runtime_data/current",
		RuntimeAppDirectory: "config",
		RuntimeWatchRoot:    true,

		ConfigType:              ConfigTypeFile,
		XDSNodeID:               "default",
		XDSServerURL:            "localhost:18000",
		XDSConnectRetryInterval: 3 * time.Second,
		XDSBackoffInitial:       10 * time.Second,
		XDSBackoffMax:           60 * time.Second,
		XDSBackoffRandomFactor:  0.5,
		XDSBackoffJitter:        true,

		TracingServiceName:      "RateLimit",
		TracingExporterProtocol: TracingHTTP,
		TracingSamplingRate:     1,

		LogLevel:  "info",
		LogFormat: LogFormatJSON,

		BackendType:    BackendMemory,
		NearLimitRatio: service.DefaultNearLimitRatio,

		DescriptorHitsAddend:   HitsAddendCharge,
		ResponseMetadataFormat: MetadataRatelimit,

		LimitLimitHeader:     service.DefaultLimitHeader,
		LimitRemainingHeader: service.DefaultRemainingHeader,
		LimitResetHeader:     service.DefaultResetHeader,

		RequestMaxDescriptors: service.DefaultMaxDescriptors,
		RequestMaxEntries:     service.DefaultMaxEntries,
		RequestMaxEntryBytes:  service.DefaultMaxEntryBytes,

		GRPCMaxConnectionAge:      24 * time.Hour,
		GRPCMaxConnectionAgeGrace: time.Hour,
		GRPCTransport:             server.TransportNative,
		GRPCMaxConcurrentStreams:  server.DefaultMaxConcurrentStreams,
		GRPCKeepaliveTime:         server.DefaultKeepaliveTime,
		GRPCKeepaliveTimeout:      server.DefaultKeepaliveTimeout,
		GRPCKeepaliveMinTime:      server.DefaultKeepaliveMinTime,

		HTTPReadHeaderTimeout: server.DefaultReadHeaderTimeout,
		HTTPReadTimeout:       server.DefaultReadTimeout,
		HTTPIdleTimeout:       server.DefaultIdleTimeout,

		PrometheusAddr:     ":9090",
		PrometheusPath:     "/metrics",
		StatsdHost:         "localhost",
		StatsdPort:         8125,
		StatsdProtocol:     StatsdTCP,
		StatsFlushInterval: 10 * time.Second,

		ShutdownDrain:   5 * time.Second,
		ShutdownTimeout: 10 * time.Second,

		MemoryMaxBuckets:    memstore.DefaultMaxBuckets,
		MemoryMaxBytes:      memstore.DefaultMaxBytes,
		MemorySweepInterval: memstore.DefaultSweepInterval,

		OnUnavailable:  OnUnavailableLocal,
		BackendTimeout: dynamo.DefaultTimeout,

		BackendWarmupTimeout: 30 * time.Second,

		DynamoDBTable:      dynamo.DefaultTable,
		AWSRegion:          dynamo.DefaultRegion,
		Namespace:          dynamo.DefaultNamespace,
		ConfigCacheTTL:     dynamo.DefaultConfigCacheTTL,
		RejectionCacheSize: dynamo.DefaultRejectionCacheSize,
		UsageRetention:     dynamo.DefaultUsageRetention,
		ShardWriteRate:     dynamo.DefaultShardWriteRate,
		ShardMergeRate:     dynamo.DefaultShardMergeRate,
		ShardMergeAfter:    dynamo.DefaultShardMergeAfter,

		LeaseTTL: lease.DefaultTTL,

		RedisSocketType:                   redisclient.SocketTCP,
		RedisType:                         redisclient.TypeSingle,
		RedisPoolSize:                     redisclient.DefaultPoolSize,
		RedisTimeout:                      redisclient.DefaultTimeout,
		RedisPoolOnEmptyBehavior:          PoolOnEmptyWait,
		RedisStartupInitialInterval:       redisclient.DefaultStartupInitialInterval,
		RedisStartupMaxInterval:           redisclient.DefaultStartupMaxInterval,
		RedisStartupMaxElapsed:            redisclient.DefaultStartupMaxElapsed,
		RedisPerSecondSocketType:          redisclient.SocketTCP,
		RedisPerSecondType:                redisclient.TypeSingle,
		RedisPerSecondPoolSize:            redisclient.DefaultPoolSize,
		RedisPerSecondTimeout:             redisclient.DefaultTimeout,
		RedisPerSecondPoolOnEmptyBehavior: PoolOnEmptyWait,
	}
	return s.withRLQSDefaults()
}

// withRLQSDefaults returns s with the Rate Limit Quota Service's defaults.
func (s Settings) withRLQSDefaults() Settings {
	s.RLQSAssignmentTTL = rlqs.DefaultTTL
	s.RLQSAbandonAfter = rlqs.DefaultAbandonAfter
	s.RLQSMaxBucketsPerStream = rlqs.DefaultMaxBuckets
	s.RLQSMaxStreamBytes = rlqs.DefaultMaxStreamBytes
	return s
}

// DynamoConfig returns the DynamoDB store's configuration: DYNAMODB_TABLE,
// NAMESPACE, BACKEND_TIMEOUT, CONFIG_CACHE_TTL, USAGE_RETENTION,
// SHARD_WRITE_RATE and SHARD_MERGE_RATE (whose 0, disabled, is -1 to the
// store), SHARD_MERGE_AFTER and REJECTION_CACHE_SIZE, whose 0 (disabled)
// is dynamo.RejectionCacheOff (the library's zero is its default size).
func (s Settings) DynamoConfig() dynamo.Config {
	c := dynamo.Config{
		Table:              s.DynamoDBTable,
		Namespace:          s.Namespace,
		Timeout:            s.BackendTimeout,
		ConfigCacheTTL:     s.ConfigCacheTTL,
		RejectionCacheSize: s.RejectionCacheSize,
		UsageRetention:     s.UsageRetention,
		ShardWriteRate:     s.ShardWriteRate,
		ShardMergeRate:     s.ShardMergeRate,
		ShardMergeAfter:    s.ShardMergeAfter,
	}
	if c.RejectionCacheSize == 0 {
		c.RejectionCacheSize = dynamo.RejectionCacheOff
	}
	if c.ShardWriteRate == 0 {
		c.ShardWriteRate = -1 // off: the library's zero is its default
	}
	if c.ShardMergeRate == 0 {
		c.ShardMergeRate = -1
	}
	return c
}

// binding ties one variable to one field of a Settings value.
type binding struct {
	name  string
	help  string
	value flag.Value
}

// bindings lists every variable in documentation order, each bound to its
// field in s. FromEnv, RegisterFlags and Table all read this one list.
func bindings(s *Settings) []binding { //nolint:funlen // a table, one row per setting
	return append([]binding{
		{"HOST", "HTTP listener address (/healthcheck, /json).", (*stringValue)(&s.Host)},
		{"PORT", "HTTP listener port.", (*intValue)(&s.Port)},
		{"GRPC_HOST", "gRPC listener address (rate limit, health, reflection).", (*stringValue)(&s.GRPCHost)},
		{"GRPC_PORT", "gRPC listener port.", (*intValue)(&s.GRPCPort)},
		{"GRPC_UDS", "Unix socket path to serve gRPC on instead of GRPC_HOST:GRPC_PORT (e.g. /var/run/ratelimit.sock); a stale socket file is replaced.", (*stringValue)(&s.GRPCUDS)},
		{"DEBUG_HOST", "Debug listener address (/metrics, /rlconfig, pprof with DEBUG_PPROF, the admin API with ADMIN_API).", (*stringValue)(&s.DebugHost)},
		{"DEBUG_PORT", "Debug listener port.", (*intValue)(&s.DebugPort)},
		{"DEBUG_PPROF", "Serve Go's pprof at /debug/pprof/ on the debug listener: CPU and allocation profiles, execution traces (docs/performance.md). Off by default: a profile costs CPU, and a trace shows every call's timing.", (*boolValue)(&s.DebugPprof)},
		{"ADMIN_API", "Serve the admin API at /admin/ on the debug listener: the operator's commands (bucket show, reset and topup; on DynamoDB and Redis also usage, stored limits, entities, audit and the namespace registry and lifecycle) over HTTP, without authentication (docs/cli.md#admin-api). Off by default: enable it only with DEBUG_HOST on loopback or a debug port no one else reaches.", (*boolValue)(&s.AdminAPI)},

		{"RUNTIME_ROOT", "Root of the runtime data; descriptor files are read from RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY.", (*stringValue)(&s.RuntimeRoot)},
		{"RUNTIME_SUBDIRECTORY", "Subdirectory of RUNTIME_ROOT.", (*stringValue)(&s.RuntimeSubdirectory)},
		{"RUNTIME_APPDIRECTORY", "Directory under the subdirectory that holds the descriptor YAML files.", (*stringValue)(&s.RuntimeAppDirectory)},
		{"RUNTIME_IGNOREDOTFILES", "Ignore descriptor files whose names start with a dot.", (*boolValue)(&s.RuntimeIgnoreDotFiles)},
		{"RUNTIME_WATCH_ROOT", "Watch all of RUNTIME_ROOT for changes rather than the descriptor directory only.", (*boolValue)(&s.RuntimeWatchRoot)},
		{"CONFIG_DIR", "Descriptor directory; when set it replaces the RUNTIME_* path and is the directory watched.", (*stringValue)(&s.ConfigDirOverride)},
		{"MERGE_DOMAIN_CONFIG", "Merge descriptor files that declare the same domain instead of rejecting them.", (*boolValue)(&s.MergeDomainConfig)},
		{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "Health is NOT_SERVING until a configuration with at least one domain is loaded, and again whenever a load leaves none.", (*boolValue)(&s.HealthyWithAtLeastOneConfigLoaded)},
		{"FORCE_START_WITHOUT_INITIAL_CONFIG", "Start even when the first configuration load fails: every request answers OK until a load succeeds.", (*boolValue)(&s.ForceStartWithoutInitialConfig)},

		{"CONFIG_TYPE", "Where the descriptor configuration comes from: FILE (the RUNTIME_* or CONFIG_DIR directory) or GRPC_XDS_SOTW (pushed by an xDS management server, as Envoy Gateway does; see CONFIG_GRPC_XDS_*).", &enumValue{p: &s.ConfigType, allowed: []string{ConfigTypeFile, ConfigTypeXDS}}},
		{"CONFIG_GRPC_XDS_NODE_ID", "Node id this service subscribes with; the server keys its snapshots by it (Envoy Gateway: envoy-ratelimit).", (*stringValue)(&s.XDSNodeID)},
		{"CONFIG_GRPC_XDS_NODE_METADATA", "Node metadata sent to the xDS server, as key=value pairs separated by commas.", (*stringValue)(&s.XDSNodeMetadata)},
		{"CONFIG_GRPC_XDS_SERVER_URL", "xDS management server, host:port.", (*stringValue)(&s.XDSServerURL)},
		{"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "While the xDS server cannot be reached, how often a connection is tried.", (*durationValue)(&s.XDSConnectRetryInterval)},
		{"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "gRPC metadata sent on every xDS stream, as key:value pairs separated by commas.", (*tagsValue)(&s.XDSHeaders)},
		{"CONFIG_GRPC_XDS_SERVER_USE_TLS", "Connect to the xDS server over TLS.", (*boolValue)(&s.XDSServerUseTLS)},
		{"CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "PEM file with the client certificate presented to the xDS server (mTLS).", (*stringValue)(&s.XDSClientTLSCert)},
		{"CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "PEM file with the key of CONFIG_GRPC_XDS_CLIENT_TLS_CERT.", (*stringValue)(&s.XDSClientTLSKey)},
		{"CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "PEM file with the CA that verifies the xDS server; empty means the system roots.", (*stringValue)(&s.XDSServerTLSCACert)},
		{"CONFIG_GRPC_XDS_SERVER_TLS_SAN", "Name the xDS server's certificate must carry, when it is not CONFIG_GRPC_XDS_SERVER_URL's host.", (*stringValue)(&s.XDSServerTLSSAN)},
		{"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "Wait before opening a new xDS stream after one broke; doubled while streams keep breaking, reset once one delivers.", (*durationValue)(&s.XDSBackoffInitial)},
		{"XDS_CLIENT_BACKOFF_MAX_INTERVAL", "Longest wait before opening a new xDS stream.", (*durationValue)(&s.XDSBackoffMax)},
		{"XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "With XDS_CLIENT_BACKOFF_JITTER, each wait is drawn within ± this fraction, in (0,1].", (*floatValue)(&s.XDSBackoffRandomFactor)},
		{"XDS_CLIENT_BACKOFF_JITTER", "Jitter the waits between xDS streams.", (*boolValue)(&s.XDSBackoffJitter)},
		{"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "Largest xDS response accepted, in bytes; 0 means gRPC's default (4 MiB).", (*intValue)(&s.XDSMaxMsgSize)},

		{"TRACING_ENABLED", "Export OpenTelemetry traces over OTLP: a span per decision (continuing the caller's W3C trace context), per store call and per DynamoDB call. The endpoint and the rest come from the standard OTEL_EXPORTER_OTLP_* variables (OTEL_EXPORTER_OTLP_ENDPOINT, …).", (*boolValue)(&s.TracingEnabled)},
		{"TRACING_SERVICE_NAME", "service.name of the exported traces.", (*stringValue)(&s.TracingServiceName)},
		{"TRACING_SERVICE_NAMESPACE", "service.namespace of the exported traces; empty leaves it out.", (*stringValue)(&s.TracingServiceNamespace)},
		{"TRACING_SERVICE_INSTANCE_ID", "service.instance.id of the exported traces; empty means a random UUID.", (*stringValue)(&s.TracingServiceInstanceID)},
		{"TRACING_EXPORTER_PROTOCOL", "OTLP transport: http (port 4318) or grpc (port 4317).", &enumValue{p: &s.TracingExporterProtocol, allowed: []string{TracingHTTP, TracingGRPC}}},
		{"TRACING_SAMPLING_RATE", "Fraction of new traces sampled, in [0,1]; a call whose caller's trace is sampled is always traced.", (*floatValue)(&s.TracingSamplingRate)},

		{"LOG_LEVEL", "Log level: trace, debug, info, warn, error, fatal or panic.", &enumValue{p: &s.LogLevel, allowed: logLevels}},
		{"LOG_FORMAT", "Log format: json or text.", &enumValue{p: &s.LogFormat, allowed: []string{LogFormatJSON, LogFormatText}}},

		{"BACKEND_TYPE", "Store: memory (embedded, one process), dynamodb or redis (REDIS_*). Unset with REDIS_URL set, it is redis, as envoyproxy/ratelimit's default (Envoy Gateway sets REDIS_URL and no BACKEND_TYPE); otherwise memory.", &backendValue{enumValue: enumValue{p: &s.BackendType, allowed: []string{BackendMemory, BackendDynamoDB, BackendRedis}}, inferred: &s.BackendInferred}},
		{"SHADOW_MODE", "Decide and record every request but always answer OK.", (*boolValue)(&s.ShadowMode)},
		{"QUOTA_MODE", "Treat every rule as quota_mode: a request is refused only when an enforced descriptor is over or every quota descriptor is.", (*boolValue)(&s.QuotaMode)},
		{"NEAR_LIMIT_RATIO", "Fraction of a limit above which requests count as near the limit, in (0,1].", (*floatValue)(&s.NearLimitRatio)},
		{"DESCRIPTOR_HITS_ADDEND", "How a descriptor's own positive hits_addend debits a limit whose YAML has no charge: key. charge: it reports cost already spent (Envoy's apply_on_stream_done, a gateway's response cost) and lands even past zero, answered OVER_LIMIT when it did not fit, as the old service's counters do; consume: all-or-nothing, like every other hit.", &enumValue{p: &s.DescriptorHitsAddend, allowed: []string{HitsAddendCharge, HitsAddendConsume}}},

		{"LIMIT_RESPONSE_HEADERS_ENABLED", "Add rate-limit headers to responses.", (*boolValue)(&s.LimitResponseHeadersEnabled)},
		{"LIMIT_LIMIT_HEADER", "Name of the header carrying the limit.", (*stringValue)(&s.LimitLimitHeader)},
		{"LIMIT_REMAINING_HEADER", "Name of the header carrying the remaining count.", (*stringValue)(&s.LimitRemainingHeader)},
		{"LIMIT_RESET_HEADER", "Name of the header carrying the seconds until the limit resets.", (*stringValue)(&s.LimitResetHeader)},
		{"RESPONSE_DYNAMIC_METADATA", "Return the request in the response's dynamic_metadata, as envoyproxy/ratelimit does.", (*boolValue)(&s.ResponseDynamicMetadata)},
		{"RESPONSE_DYNAMIC_METADATA_FORMAT", "Shape of that metadata: ratelimit (envoyproxy/ratelimit's: domain, descriptors with a limit override in its text form, hitsAddend, and the metadata of the rules that passed) or extended (also quotaModeEnabled and quotaModeViolations, and overrides as structs).", &enumValue{p: &s.ResponseMetadataFormat, allowed: []string{MetadataRatelimit, MetadataExtended}}},

		{"REQUEST_MAX_DESCRIPTORS", "Most descriptors one request may carry; a larger request is answered InvalidArgument.", (*intValue)(&s.RequestMaxDescriptors)},
		{"REQUEST_MAX_ENTRIES", "Most entries one descriptor may carry; more is answered InvalidArgument.", (*intValue)(&s.RequestMaxEntries)},
		{"REQUEST_MAX_ENTRY_BYTES", "Longest domain, entry key or entry value, in bytes; longer is answered InvalidArgument.", (*intValue)(&s.RequestMaxEntryBytes)},

		{"GRPC_SERVER_USE_TLS", "Serve gRPC over TLS.", (*boolValue)(&s.GRPCServerUseTLS)},
		{"GRPC_SERVER_TLS_CERT", "PEM file with the server certificate chain; reloaded when it changes.", (*stringValue)(&s.GRPCServerTLSCert)},
		{"GRPC_SERVER_TLS_KEY", "PEM file with the server private key; reloaded when it changes.", (*stringValue)(&s.GRPCServerTLSKey)},
		{"GRPC_CLIENT_TLS_CACERT", "PEM file with the client CA bundle; when set, clients must present a certificate it verifies (mTLS).", (*stringValue)(&s.GRPCClientTLSCACert)},
		{"GRPC_CLIENT_TLS_SAN", "With mTLS, a subject alternative name (DNS, URI, IP or email) every client certificate must carry.", (*stringValue)(&s.GRPCClientTLSSAN)},
		{"GRPC_MAX_CONNECTION_AGE", "Age after which a gRPC connection is sent GOAWAY; 0 means no maximum.", (*durationValue)(&s.GRPCMaxConnectionAge)},
		{"GRPC_MAX_CONNECTION_AGE_GRACE", "Time after GRPC_MAX_CONNECTION_AGE before the connection is closed.", (*durationValue)(&s.GRPCMaxConnectionAgeGrace)},
		{"GRPC_MAX_CONCURRENT_STREAMS", "Calls one gRPC connection holds at once (SETTINGS_MAX_CONCURRENT_STREAMS); a call the client reset holds its slot until its handler returns.", (*intValue)(&s.GRPCMaxConcurrentStreams)},
		{"GRPC_MAX_CONNECTION_IDLE", "Time a gRPC connection may hold no call before it is sent GOAWAY; 0 means no maximum.", (*durationValue)(&s.GRPCMaxConnectionIdle)},
		{"GRPC_KEEPALIVE_TIME", "Time a gRPC connection may stay silent before the server pings it (at least 1s).", (*durationValue)(&s.GRPCKeepaliveTime)},
		{"GRPC_KEEPALIVE_TIMEOUT", "Time the server waits for anything after its ping before closing the connection; also how long a write may make no progress.", (*durationValue)(&s.GRPCKeepaliveTimeout)},
		{"GRPC_KEEPALIVE_ENFORCEMENT_MIN_TIME", "Least time between a client's pings while nothing is sent to it; a client pinging more often is sent GOAWAY too_many_pings on its third strike.", (*durationValue)(&s.GRPCKeepaliveMinTime)},
		{"GRPC_KEEPALIVE_ENFORCEMENT_PERMIT_WITHOUT_STREAM", "Allow client pings while the connection holds no call (otherwise at most one every two hours).", (*boolValue)(&s.GRPCKeepalivePermitWithoutStream)},
		{"GRPC_TRANSPORT", "gRPC server: native (answers calls on the connection's reader on the embedded store and writes once per batch; see docs/performance.md) or grpc-go (grpc-go's own server).", &enumValue{p: &s.GRPCTransport, allowed: []string{server.TransportNative, server.TransportGRPCGo}}},

		{"HTTP_READ_HEADER_TIMEOUT", "HTTP and debug listeners: time a client has to send a request's headers.", (*durationValue)(&s.HTTPReadHeaderTimeout)},
		{"HTTP_READ_TIMEOUT", "HTTP and debug listeners: time a client has to send a whole request, body included.", (*durationValue)(&s.HTTPReadTimeout)},
		{"HTTP_IDLE_TIMEOUT", "HTTP and debug listeners: time an idle kept-alive connection stays open.", (*durationValue)(&s.HTTPIdleTimeout)},
		{"HTTP_MAX_CONNECTIONS", "Most connections each of the HTTP and debug listeners holds open (further clients wait); 0 means a quarter of the open-file limit, between 16 and 4096.", (*intValue)(&s.HTTPMaxConnections)},

		{"USE_PROMETHEUS", "Also serve every metric on PROMETHEUS_ADDR at PROMETHEUS_PATH (they are always on the debug port's /metrics).", (*boolValue)(&s.UsePrometheus)},
		{"PROMETHEUS_ADDR", "Address of the USE_PROMETHEUS listener.", (*stringValue)(&s.PrometheusAddr)},
		{"PROMETHEUS_PATH", "Path of the metrics on the USE_PROMETHEUS listener.", (*stringValue)(&s.PrometheusPath)},
		{"PROMETHEUS_MAPPER_YAML", "statsd-exporter mapping file naming the envoyproxy/ratelimit-compatible metrics; empty means its default mapping. A file that does not load stops the start.", (*stringValue)(&s.PrometheusMapperYAML)},
		{"PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", "With the default mapping, observe ratelimit_service_response_time_seconds in milliseconds, as envoyproxy/ratelimit does with this setting.", (*boolValue)(&s.PrometheusResponseTimeAsMilliseconds)},
		{"USE_STATSD", "Send the envoyproxy/ratelimit stats (same names, same lines, through the same statsd library, gostats) to STATSD_HOST:STATSD_PORT over STATSD_PROTOCOL.", (*boolValue)(&s.UseStatsd)},
		{"STATSD_HOST", "statsd server host.", (*stringValue)(&s.StatsdHost)},
		{"STATSD_PORT", "statsd server port.", (*intValue)(&s.StatsdPort)},
		{"STATSD_PROTOCOL", "statsd transport: tcp, as envoyproxy/ratelimit sends by default (a statsd_exporter listens on both), or udp (a DogStatsD agent).", &enumValue{p: &s.StatsdProtocol, allowed: []string{StatsdTCP, StatsdUDP}}},
		{"EXTRA_TAGS", "Tags added to every statsd stat, as key:value pairs separated by commas, encoded in the name as envoyproxy/ratelimit does (.__key=value).", (*tagsValue)(&s.ExtraTags)},
		{"STATS_FLUSH_INTERVAL", "How often counters are sent to statsd and folded into the compatible Prometheus metrics (a scrape folds them in too).", (*durationValue)(&s.StatsFlushInterval)},
		{"DISABLE_STATS", "Emit none of the envoyproxy/ratelimit-compatible stats (the ratelimit_* metrics stay).", (*boolValue)(&s.DisableStats)},

		{"RLQS_ASSIGNMENT_TTL", "Time to live of each assignment the Rate Limit Quota Service (RLQS) sends, in whole seconds (Envoy reads the seconds only); at least two of Envoy's report intervals, which Envoy 1.40 holds at 5s (see docs/rlqs.md).", (*durationValue)(&s.RLQSAssignmentTTL)},
		{"RLQS_ABANDON_AFTER", "An RLQS bucket that reports no demand this long is abandoned: Envoy drops it, and its next request subscribes it again.", (*durationValue)(&s.RLQSAbandonAfter)},
		{"RLQS_MAX_BUCKETS_PER_STREAM", "Most buckets one RLQS stream watches; a report past it ends the stream ResourceExhausted.", (*intValue)(&s.RLQSMaxBucketsPerStream)},
		{"RLQS_MAX_STREAM_BYTES", "Most bytes of bucket ids (keys and values) one RLQS stream watches; past it the stream ends ResourceExhausted. A connection holds at most GRPC_MAX_CONCURRENT_STREAMS streams.", (*intValue)(&s.RLQSMaxStreamBytes)},

		{"SHUTDOWN_DRAIN", "On SIGTERM, time spent reporting NOT_SERVING before the servers stop.", (*durationValue)(&s.ShutdownDrain)},
		{"SHUTDOWN_TIMEOUT", "Deadline for the graceful stop, after which connections are closed.", (*durationValue)(&s.ShutdownTimeout)},

		{"MEMORY_MAX_BUCKETS", "Most buckets the memory store holds.", (*intValue)(&s.MemoryMaxBuckets)},
		{"MEMORY_MAX_BYTES", "Most bytes the memory store's buckets hold (keys and bookkeeping). At the bound a new key evicts buckets (refilled ones first, then those not in use, nearest to full) and is decided: never ON_UNAVAILABLE. An eviction can admit at most the evicted bucket's deficit once more (docs/operations.md#memory).", (*intValue)(&s.MemoryMaxBytes)},
		{"MEMORY_SWEEP_INTERVAL", "How often the memory store drops buckets that have refilled.", (*durationValue)(&s.MemorySweepInterval)},

		{"ON_UNAVAILABLE", "Decision when the store fails or times out: local (the DynamoDB store: decide on this replica's own buckets at its share of each limit, and charge what it admitted to the shared items once DynamoDB answers: the share follows the replica's part of the item's consumption over about the last 5 s, as the item's images showed it, at least 1/(4·FLEET_SIZE), 1/FLEET_SIZE with under a second of it, and a new local bucket starts from that share of the tokens the item last held; the fleet's shares add up to at most 1 + (N−1)/(4N); the embedded store, which does not fail, as allow), allow (OK) or block (OVER_LIMIT). See docs/operations.md#when-dynamodb-is-slow-or-down.", &enumValue{p: &s.OnUnavailable, allowed: []string{OnUnavailableLocal, OnUnavailableAllow, OnUnavailableBlock}}},
		{"FLEET_SIZE", "Replicas sharing the DynamoDB table: ON_UNAVAILABLE=local gives a replica at least 1/(4·N) of every limit, and 1/N before it has seen a second of an item's demand. 0 counts them: each replica keeps a heartbeat in the table every 5 s and the last count holds through an outage.", (*intValue)(&s.FleetSize)},
		{"BACKEND_TIMEOUT", "Budget of one store decision, every DynamoDB call within it; a decision queued behind its item's write takes up to about twice this: keep that below Envoy's filter timeout. A call that runs out while this process runs late by a quarter of its time or more counts as cause=process_late in ratelimit_dynamodb_timeouts_total: the replica's CPU, not DynamoDB; give it CPU rather than raise this (docs/operations.md#a-slow-machine-is-not-an-outage).", (*durationValue)(&s.BackendTimeout)},
		{"BACKEND_WARMUP_TIMEOUT", "On DynamoDB, health is NOT_SERVING (the listeners already answer) until the store has warmed up: credentials resolved, the table described and its schema checked, connections opened, every kind of call a decision makes answered. An attempt that has not succeeded within this is logged with what failed, and the warm-up starts over, still not ready.", (*durationValue)(&s.BackendWarmupTimeout)},

		{"DYNAMODB_TABLE", "DynamoDB table name.", (*stringValue)(&s.DynamoDBTable)},
		{"DYNAMODB_ENDPOINT", "DynamoDB endpoint URL (e.g. DynamoDB Local); empty means AWS.", (*stringValue)(&s.DynamoDBEndpoint)},
		{"AWS_REGION", "AWS region of the table.", (*stringValue)(&s.AWSRegion)},
		{"NAMESPACE", "Namespace of this deployment's rules (those whose descriptor file names none) and admin commands: on a shared DynamoDB table, buckets, stored limits, entities and audit records of one namespace are invisible to another.", (*stringValue)(&s.Namespace)},
		{"CONFIG_CACHE_TTL", "Lifetime of cached limit configurations read from the store, and how often a replica reads the namespace registry: on DynamoDB a stored limit applies to every decision made this long or more after `ratelimit limits set`, and a namespace deleted with `ratelimit namespace delete` stops being decided within it.", (*durationValue)(&s.ConfigCacheTTL)},
		{"REJECTION_CACHE_SIZE", "Entries in the cache of buckets known to be over limit; 0 disables it.", (*intValue)(&s.RejectionCacheSize)},
		{"SHARD_WRITE_RATE", "Writes a second to one bucket item, from this replica, at which the DynamoDB store doubles the bucket's shard count before DynamoDB throttles the item (about 1,000 writes a second); measured over a second; 0 disables it (a bucket then doubles only once throttled). docs/dynamodb.md#sharding.", (*floatValue)(&s.ShardWriteRate)},
		{"SHARD_MERGE_RATE", "Writes a second per item, once halved, below which a sharded bucket's writes must stay for SHARD_MERGE_AFTER before the store halves its shard count, moving the removed shards' tokens into the others; 0 disables merging.", (*floatValue)(&s.ShardMergeRate)},
		{"SHARD_MERGE_AFTER", "How long a sharded bucket stays below SHARD_MERGE_RATE before it merges.", (*durationValue)(&s.ShardMergeAfter)},
		{"USAGE_RETENTION", "How long a usage snapshot (hourly, daily, monthly) lives past the end of its window before DynamoDB's TTL deletes it; read by the usage aggregator (docs/usage.md).", (*durationValue)(&s.UsageRetention)},

		{"LEASE_SIGNING_KEY", "Key signing the leases an admission returns for settling its cost after the response (docs/leases.md): its raw bytes, at least 32 (e.g. openssl rand -base64 48), the same on every replica. Never printed; prefer LEASE_SIGNING_KEY_FILE. With neither set, a random key is generated and a warning logged: leases then settle only on the replica that issued them, until it restarts.", (*secretValue)(&s.LeaseSigningKey)},
		{"LEASE_SIGNING_KEY_PREVIOUS", "Keys that still verify leases while a new LEASE_SIGNING_KEY is rolled out, comma-separated (docs/leases.md#rotating-the-key). Never printed.", (*secretValue)(&s.LeaseSigningKeyPrevious)},
		{"LEASE_SIGNING_KEY_FILE", "File of lease keys shared by every replica (e.g. a mounted Kubernetes Secret), instead of LEASE_SIGNING_KEY: its first non-empty line is the signing key, each further line a key that still verifies; surrounding whitespace is ignored.", (*stringValue)(&s.LeaseSigningKeyFile)},
		{"LEASE_TTL", "How long after its admission a lease can be settled, in (0,24h]: a later settlement is ignored and counted as expired, and the store remembers each settled lease this long.", (*durationValue)(&s.LeaseTTL)},
	}, redisBindings(s)...)
}

var logLevels = []string{"trace", "debug", "info", "warn", "warning", "error", "fatal", "panic"}

// FromEnv returns Defaults overridden by every variable that getenv reports
// non-empty (os.Getenv in production). A value that does not parse is an
// error naming the variable and the value; all such errors are returned
// together. FromEnv does not call Validate, so that flags can still
// override before the combination is checked.
//
// BACKEND_TYPE unset with REDIS_URL set selects the Redis store
// (BackendInferred). While the environment selects another store, the
// REDIS_* settings are ignored (CheckLegacy names them): a value of theirs
// that does not parse is no error.
func FromEnv(getenv func(string) string) (Settings, error) {
	s := Defaults()
	backend, inferred := envBackend(getenv)
	var errs []error
	for _, b := range bindings(&s) {
		v := getenv(b.name)
		if v == "" {
			continue
		}
		if err := legacyValueError(b.name, v); err != nil {
			errs = append(errs, fmt.Errorf("config: %s=%q: %w", b.name, v, err))
			continue
		}
		if err := b.value.Set(v); err != nil {
			if backend != BackendRedis && isRedisSetting(b.name) {
				continue
			}
			errs = append(errs, fmt.Errorf("config: %s=%q: %w", b.name, v, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Defaults(), err
	}
	if inferred {
		s.BackendType, s.BackendInferred = BackendRedis, true
	}
	return s, nil
}

// RegisterFlags defines one flag per variable on fs, named as the variable
// in lower case (-grpc_port) and defaulting to the value s holds now, so
// flags parsed after FromEnv override the environment. Parsing fs writes
// into s, which must outlive the parse.
func (s *Settings) RegisterFlags(fs *flag.FlagSet) {
	for _, b := range bindings(s) {
		fs.Var(b.value, strings.ToLower(b.name), b.help+" ($"+b.name+")")
	}
}

// Table describes every variable with its default, in documentation order.
// The settings table of docs/settings.md and `ratelimit settings` are generated from
// it.
func Table() []Var {
	d := Defaults()
	bs := bindings(&d)
	vars := make([]Var, len(bs))
	for i, b := range bs {
		vars[i] = Var{Name: b.name, Default: b.value.String(), Help: b.help, Compat: compatOf(b.name)}
	}
	return vars
}

// MarkdownTable renders Table as the settings table of docs/settings.md: one row per
// variable with its default in code style ("" for empty), its help and how
// it compares with envoyproxy/ratelimit's, then one row per group of
// envoyproxy/ratelimit settings that no binding reads (Unbound).
func MarkdownTable() string {
	var b strings.Builder
	b.WriteString("| Variable | Default | Description | envoyproxy/ratelimit |\n|---|---|---|---|\n")
	for _, v := range Table() {
		def := "`" + v.Default + "`"
		if v.Default == "" {
			def = `""`
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", v.Name, def, strings.ReplaceAll(v.Help, "|", "\\|"), v.Compat)
	}
	for _, v := range Unbound() {
		fmt.Fprintf(&b, "| `%s` | | %s | %s |\n", v.Name, strings.ReplaceAll(v.Help, "|", "\\|"), v.Compat)
	}
	return b.String()
}

// ExtraTagMap returns EXTRA_TAGS as a map (empty when unset).
func (s Settings) ExtraTagMap() map[string]string {
	m, err := parseTags(s.ExtraTags)
	if err != nil {
		return map[string]string{}
	}
	return m
}

// XDSNodeMetadataMap returns CONFIG_GRPC_XDS_NODE_METADATA as a map:
// key=value pairs separated by commas, as envoyproxy/ratelimit reads it.
func (s Settings) XDSNodeMetadataMap() (map[string]string, error) {
	m := map[string]string{}
	for _, pair := range strings.Split(s.XDSNodeMetadata, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		k, v, ok := strings.Cut(pair, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%q is not key=value", pair)
		}
		m[k] = v
	}
	return m, nil
}

// XDSHeaderMap returns CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS as a map.
func (s Settings) XDSHeaderMap() map[string]string {
	m, err := parseTags(s.XDSHeaders)
	if err != nil {
		return map[string]string{}
	}
	return m
}

// LeasePreviousKeys returns LEASE_SIGNING_KEY_PREVIOUS split at commas,
// for lease.FromSettings.
func (s Settings) LeasePreviousKeys() []string {
	if s.LeaseSigningKeyPrevious == "" {
		return nil
	}
	return strings.Split(s.LeaseSigningKeyPrevious, ",")
}

// LeaseKeyring returns the lease keyring the settings describe (see
// lease.FromSettings): generated reports a random key, which leases signed
// on another replica or before a restart do not verify with.
func (s Settings) LeaseKeyring() (k *lease.Keyring, generated bool, err error) {
	return lease.FromSettings(s.LeaseSigningKey, s.LeasePreviousKeys(), s.LeaseSigningKeyFile)
}

// ConfigDir is the directory holding the descriptor YAML: CONFIG_DIR when
// set, else RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY.
func (s Settings) ConfigDir() string {
	if s.ConfigDirOverride != "" {
		return filepath.Clean(s.ConfigDirOverride)
	}
	return filepath.Join(s.RuntimeRoot, s.RuntimeSubdirectory, s.RuntimeAppDirectory)
}

// WatchDir is the directory watched for descriptor changes: CONFIG_DIR when
// set, else RUNTIME_ROOT when RUNTIME_WATCH_ROOT, else ConfigDir.
func (s Settings) WatchDir() string {
	if s.ConfigDirOverride == "" && s.RuntimeWatchRoot {
		return filepath.Clean(s.RuntimeRoot)
	}
	return s.ConfigDir()
}

// LoadOptions are the descriptor loading options the settings select.
func (s Settings) LoadOptions() descriptors.Options {
	return descriptors.Options{
		MergeDomains:   s.MergeDomainConfig,
		IgnoreDotFiles: s.RuntimeIgnoreDotFiles,
	}
}

// Loader returns a function that loads the descriptor directory with the
// settings' options, as ReloaderOptions.Load expects. With QUOTA_MODE every
// rule of a loaded configuration is in quota mode, as envoyproxy/ratelimit's
// global quota mode treats every limited descriptor; the configuration is
// changed before anything else can see it.
func (s Settings) Loader() func(dir string) (*descriptors.Config, error) {
	opts := s.LoadOptions()
	quota := s.QuotaMode
	return func(dir string) (*descriptors.Config, error) {
		cfg, err := descriptors.LoadDir(dir, opts)
		if err != nil || !quota {
			return cfg, err
		}
		for _, r := range cfg.Rules() {
			r.QuotaMode = true
		}
		return cfg, nil
	}
}
