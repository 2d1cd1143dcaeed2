package config

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/dynalimit/dynalimit/internal/lease"
	"github.com/dynalimit/dynalimit/internal/server"
	"github.com/dynalimit/dynalimit/pkg/descriptors"
)

// Validate reports every invalid value or combination at once: ports out of
// range, unknown enumerated values, NEAR_LIMIT_RATIO outside (0,1],
// non-positive durations and sizes, TLS enabled without a certificate and
// key, client CA or SAN without TLS, a SAN without a client CA, and empty
// names where the chosen backend needs them (on Redis, every REDIS_* of the
// targets in use).
func (s Settings) Validate() error {
	var p problems
	s.validateListeners(&p)
	if s.ConfigDirOverride == "" && s.RuntimeRoot == "" {
		p.add("RUNTIME_ROOT is empty and CONFIG_DIR is unset: no descriptor directory")
	}
	s.validateChoices(&p)
	if s.ConfigType == ConfigTypeXDS {
		s.validateXDS(&p)
	}
	if math.IsNaN(s.NearLimitRatio) || s.NearLimitRatio <= 0 || s.NearLimitRatio > 1 {
		p.add("NEAR_LIMIT_RATIO=%v: want a value in (0,1]", s.NearLimitRatio)
	}
	for _, r := range []struct {
		name string
		v    float64
	}{{"SHARD_WRITE_RATE", s.ShardWriteRate}, {"SHARD_MERGE_RATE", s.ShardMergeRate}} {
		if math.IsNaN(r.v) || r.v < 0 {
			p.add("%s=%v: want a rate ≥ 0", r.name, r.v)
		}
	}
	if s.LimitResponseHeadersEnabled {
		s.validateHeaders(&p)
	}
	s.validateTLS(&p)
	s.validateDurations(&p)
	s.validateSizes(&p)
	s.validateBackend(&p)
	s.validateLease(&p)
	return errors.Join(p...)
}

// problems collects what Validate finds, in the order it looks.
type problems []error

// add records one problem, its text prefixed "config: ".
func (p *problems) add(format string, args ...any) {
	*p = append(*p, fmt.Errorf("config: "+format, args...))
}

// enum records a problem unless v is one of allowed.
func (p *problems) enum(name, v string, allowed ...string) {
	if !slices.Contains(allowed, v) {
		p.add("%s=%q: want one of %s", name, v, strings.Join(allowed, ", "))
	}
}

// validateListeners checks the ports and the metrics outputs.
func (s Settings) validateListeners(p *problems) {
	for _, port := range []struct {
		name string
		v    int
	}{{"PORT", s.Port}, {"GRPC_PORT", s.GRPCPort}, {"DEBUG_PORT", s.DebugPort}, {"STATSD_PORT", s.StatsdPort}} {
		if port.v < 0 || port.v > 65535 {
			p.add("%s=%d: want a port in [0,65535]", port.name, port.v)
		}
	}
	if s.UsePrometheus {
		if s.PrometheusAddr == "" {
			p.add("USE_PROMETHEUS is true but PROMETHEUS_ADDR is empty")
		}
		if !strings.HasPrefix(s.PrometheusPath, "/") {
			p.add("PROMETHEUS_PATH=%q: want a path starting with /", s.PrometheusPath)
		}
	}
	if s.UseStatsd && s.StatsdHost == "" {
		p.add("USE_STATSD is true but STATSD_HOST is empty")
	}
}

// validateChoices checks the settings that take one of a few values, and
// the tracing sampling rate.
func (s Settings) validateChoices(p *problems) {
	if _, err := logrus.ParseLevel(s.LogLevel); err != nil {
		p.add("LOG_LEVEL=%q: want one of %s", s.LogLevel, strings.Join(logLevels, ", "))
	}
	p.enum("LOG_FORMAT", s.LogFormat, LogFormatJSON, LogFormatText)
	p.enum("BACKEND_TYPE", s.BackendType, BackendMemory, BackendDynamoDB, BackendRedis)
	p.enum("GRPC_TRANSPORT", s.GRPCTransport, server.TransportNative, server.TransportGRPCGo)
	p.enum("ON_UNAVAILABLE", s.OnUnavailable, OnUnavailableLocal, OnUnavailableAllow, OnUnavailableBlock)
	if s.FleetSize < 0 {
		p.add("FLEET_SIZE=%d: want 0 (count the replicas) or more", s.FleetSize)
	}
	p.enum("STATSD_PROTOCOL", s.StatsdProtocol, StatsdTCP, StatsdUDP)
	p.enum("DESCRIPTOR_HITS_ADDEND", s.DescriptorHitsAddend, HitsAddendCharge, HitsAddendConsume)
	p.enum("RESPONSE_DYNAMIC_METADATA_FORMAT", s.ResponseMetadataFormat, MetadataRatelimit, MetadataExtended)
	p.enum("CONFIG_TYPE", s.ConfigType, ConfigTypeFile, ConfigTypeXDS)
	p.enum("TRACING_EXPORTER_PROTOCOL", s.TracingExporterProtocol, TracingHTTP, TracingGRPC)
	if math.IsNaN(s.TracingSamplingRate) || s.TracingSamplingRate < 0 || s.TracingSamplingRate > 1 {
		p.add("TRACING_SAMPLING_RATE=%v: want a value in [0,1]", s.TracingSamplingRate)
	}
}

// validateXDS checks the xDS client's settings (CONFIG_TYPE=GRPC_XDS_SOTW).
func (s Settings) validateXDS(p *problems) {
	if s.XDSServerURL == "" {
		p.add("CONFIG_TYPE is GRPC_XDS_SOTW but CONFIG_GRPC_XDS_SERVER_URL is empty")
	}
	if _, err := s.XDSNodeMetadataMap(); err != nil {
		p.add("CONFIG_GRPC_XDS_NODE_METADATA=%q: %v", s.XDSNodeMetadata, err)
	}
	if (s.XDSClientTLSCert == "") != (s.XDSClientTLSKey == "") {
		p.add("CONFIG_GRPC_XDS_CLIENT_TLS_CERT and CONFIG_GRPC_XDS_CLIENT_TLS_KEY go together: set both or neither")
	}
	if math.IsNaN(s.XDSBackoffRandomFactor) || s.XDSBackoffRandomFactor <= 0 || s.XDSBackoffRandomFactor > 1 {
		p.add("XDS_CLIENT_BACKOFF_RANDOM_FACTOR=%v: want a value in (0,1]", s.XDSBackoffRandomFactor)
	}
	if s.XDSBackoffMax < s.XDSBackoffInitial {
		p.add("XDS_CLIENT_BACKOFF_MAX_INTERVAL=%s is below XDS_CLIENT_BACKOFF_INITIAL_INTERVAL=%s", s.XDSBackoffMax, s.XDSBackoffInitial)
	}
	if s.XDSMaxMsgSize < 0 {
		p.add("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES=%d: want ≥ 0", s.XDSMaxMsgSize)
	}
}

// validateHeaders checks the names of the limit response headers
// (LIMIT_RESPONSE_HEADERS_ENABLED).
func (s Settings) validateHeaders(p *problems) {
	for _, h := range []struct{ name, v string }{
		{"LIMIT_LIMIT_HEADER", s.LimitLimitHeader},
		{"LIMIT_REMAINING_HEADER", s.LimitRemainingHeader},
		{"LIMIT_RESET_HEADER", s.LimitResetHeader},
	} {
		if !validHeaderName(h.v) {
			p.add("%s=%q: want a header name when LIMIT_RESPONSE_HEADERS_ENABLED is true", h.name, h.v)
		}
	}
}

// validateTLS checks that the server's TLS settings go together.
func (s Settings) validateTLS(p *problems) {
	if s.GRPCServerUseTLS {
		if s.GRPCServerTLSCert == "" {
			p.add("GRPC_SERVER_USE_TLS is true but GRPC_SERVER_TLS_CERT is empty")
		}
		if s.GRPCServerTLSKey == "" {
			p.add("GRPC_SERVER_USE_TLS is true but GRPC_SERVER_TLS_KEY is empty")
		}
	} else if s.GRPCClientTLSCACert != "" {
		p.add("GRPC_CLIENT_TLS_CACERT is set but GRPC_SERVER_USE_TLS is false")
	}
	if s.GRPCClientTLSSAN != "" && s.GRPCClientTLSCACert == "" {
		p.add("GRPC_CLIENT_TLS_SAN is set but GRPC_CLIENT_TLS_CACERT is empty: client certificates are not requested")
	}
}

// validateDurations checks that every duration is positive, or zero where
// zero means off.
func (s Settings) validateDurations(p *problems) {
	for _, d := range []struct {
		name   string
		v      time.Duration
		allow0 bool
	}{
		{"GRPC_MAX_CONNECTION_AGE", s.GRPCMaxConnectionAge, true},
		{"GRPC_MAX_CONNECTION_AGE_GRACE", s.GRPCMaxConnectionAgeGrace, true},
		{"GRPC_MAX_CONNECTION_IDLE", s.GRPCMaxConnectionIdle, true},
		{"GRPC_KEEPALIVE_TIME", s.GRPCKeepaliveTime, false},
		{"GRPC_KEEPALIVE_TIMEOUT", s.GRPCKeepaliveTimeout, false},
		{"GRPC_KEEPALIVE_ENFORCEMENT_MIN_TIME", s.GRPCKeepaliveMinTime, false},
		{"HTTP_READ_HEADER_TIMEOUT", s.HTTPReadHeaderTimeout, false},
		{"HTTP_READ_TIMEOUT", s.HTTPReadTimeout, false},
		{"HTTP_IDLE_TIMEOUT", s.HTTPIdleTimeout, false},
		{"RLQS_ABANDON_AFTER", s.RLQSAbandonAfter, false},
		{"SHUTDOWN_DRAIN", s.ShutdownDrain, true},
		{"SHUTDOWN_TIMEOUT", s.ShutdownTimeout, false},
		{"MEMORY_SWEEP_INTERVAL", s.MemorySweepInterval, false},
		{"STATS_FLUSH_INTERVAL", s.StatsFlushInterval, false},
		{"BACKEND_TIMEOUT", s.BackendTimeout, false},
		{"BACKEND_WARMUP_TIMEOUT", s.BackendWarmupTimeout, false},
		{"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", s.XDSConnectRetryInterval, false},
		{"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", s.XDSBackoffInitial, false},
		{"CONFIG_CACHE_TTL", s.ConfigCacheTTL, true},
		{"USAGE_RETENTION", s.UsageRetention, false},
		{"SHARD_MERGE_AFTER", s.ShardMergeAfter, false},
	} {
		switch {
		case d.v < 0:
			p.add("%s=%s: want a duration ≥ 0", d.name, d.v)
		case d.v == 0 && !d.allow0:
			p.add("%s=%s: want a duration > 0", d.name, d.v)
		}
	}
}

// validateSizes checks the request bounds, the connection bound and the
// sizes of the memory store and the rejection cache.
func (s Settings) validateSizes(p *problems) {
	for _, n := range []struct {
		name string
		v    int
	}{
		{"REQUEST_MAX_DESCRIPTORS", s.RequestMaxDescriptors},
		{"REQUEST_MAX_ENTRIES", s.RequestMaxEntries},
		{"REQUEST_MAX_ENTRY_BYTES", s.RequestMaxEntryBytes},
		{"GRPC_MAX_CONCURRENT_STREAMS", s.GRPCMaxConcurrentStreams},
		{"RLQS_MAX_BUCKETS_PER_STREAM", s.RLQSMaxBucketsPerStream},
		{"RLQS_MAX_STREAM_BYTES", s.RLQSMaxStreamBytes},
	} {
		if n.v <= 0 {
			p.add("%s=%d: want > 0", n.name, n.v)
		}
	}
	if s.GRPCMaxConcurrentStreams > math.MaxInt32 {
		p.add("GRPC_MAX_CONCURRENT_STREAMS=%d: want at most %d", s.GRPCMaxConcurrentStreams, math.MaxInt32)
	}
	if s.RLQSAssignmentTTL < time.Second || s.RLQSAssignmentTTL%time.Second != 0 {
		p.add("RLQS_ASSIGNMENT_TTL=%s: want whole seconds, at least 1s", s.RLQSAssignmentTTL)
	}
	if s.HTTPMaxConnections < 0 {
		p.add("HTTP_MAX_CONNECTIONS=%d: want ≥ 0 (0 derives it from the open-file limit)", s.HTTPMaxConnections)
	}
	if s.MemoryMaxBuckets <= 0 {
		p.add("MEMORY_MAX_BUCKETS=%d: want > 0", s.MemoryMaxBuckets)
	}
	if s.MemoryMaxBytes <= 0 {
		p.add("MEMORY_MAX_BYTES=%d: want > 0", s.MemoryMaxBytes)
	}
	if s.RejectionCacheSize < 0 {
		p.add("REJECTION_CACHE_SIZE=%d: want ≥ 0", s.RejectionCacheSize)
	}
}

// validateBackend checks the namespace and the names the chosen backend
// needs.
func (s Settings) validateBackend(p *problems) {
	if !descriptors.ValidNamespace(s.Namespace) {
		p.add("NAMESPACE=%q: want %s, as a descriptor file's namespace: key", s.Namespace, descriptors.NamespaceRule)
	}
	if s.BackendType == BackendRedis {
		s.validateRedis(p)
	}
	if s.BackendType == BackendDynamoDB {
		if s.DynamoDBTable == "" {
			p.add("BACKEND_TYPE is dynamodb but DYNAMODB_TABLE is empty")
		}
		if s.AWSRegion == "" {
			p.add("BACKEND_TYPE is dynamodb but AWS_REGION is empty")
		}
	}
}

// validateLease checks the lease keys (without reading the key file, which
// LeaseKeyring reads) and LEASE_TTL.
func (s Settings) validateLease(p *problems) {
	if err := lease.CheckSettings(s.LeaseSigningKey, s.LeasePreviousKeys(), s.LeaseSigningKeyFile); err != nil {
		p.add("%w", err)
	}
	if s.LeaseTTL <= 0 || s.LeaseTTL > lease.MaxTTL {
		p.add("LEASE_TTL=%s: want a duration in (0,%s]", s.LeaseTTL, lease.MaxTTL)
	}
}

// validHeaderName reports whether h is a non-empty RFC 9110 token.
func validHeaderName(h string) bool {
	if h == "" {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}
