package redisclient

import (
	"time"

	"github.com/redis/rueidis"
)

// Values of Target.SocketType (REDIS_SOCKET_TYPE).
const (
	SocketTCP  = "tcp"  // host:port addresses, or redis:// and rediss:// URLs
	SocketUnix = "unix" // the path of a unix socket
)

// Values of Target.Type (REDIS_TYPE), lower-cased.
const (
	TypeSingle   = "single"   // one Redis: the client never asks for cluster slots
	TypeSentinel = "sentinel" // the master of a set monitored by sentinels
	TypeCluster  = "cluster"  // a Redis Cluster, found from one or more seeds
)

// Defaults of the settings this package reads.
const (
	// DefaultPoolSize is REDIS_POOL_SIZE's default, envoyproxy/ratelimit's.
	DefaultPoolSize = 10
	// DefaultTimeout is REDIS_TIMEOUT's default: the longest a dial, a
	// write or the wait for an answer takes on a connection before the
	// connection is closed and every call waiting on it fails.
	DefaultTimeout = time.Second
	// DefaultStartupInitialInterval, DefaultStartupMaxInterval and
	// DefaultStartupMaxElapsed are the REDIS_STARTUP_* defaults,
	// envoyproxy/ratelimit's: Open retries after 1 s, doubling up to
	// 30 s, for as long as its context lasts.
	DefaultStartupInitialInterval = time.Second
	DefaultStartupMaxInterval     = 30 * time.Second
	DefaultStartupMaxElapsed      = time.Duration(0)
)

// Target is one Redis deployment: the main one (REDIS_*) or the one serving
// per-second limits (REDIS_PERSECOND_*). Its String never shows a password.
type Target struct {
	// Setting is the prefix of the settings this target came from, REDIS
	// or REDIS_PERSECOND: errors name REDIS_URL or REDIS_PERSECOND_URL.
	Setting string

	SocketType     string        // _SOCKET_TYPE: tcp or unix
	Type           string        // _TYPE: single, sentinel or cluster (any case)
	URL            string        // _URL: address(es); see the package doc
	Auth           string        // _AUTH: password, or user:password
	SentinelAuth   string        // _SENTINEL_AUTH: the sentinels' password, or user:password
	TLS            bool          // _TLS: connect over TLS (a rediss:// URL does too)
	PoolSize       int           // _POOL_SIZE: rueidis BlockingPoolSize
	PipelineWindow time.Duration // _PIPELINE_WINDOW: rueidis MaxFlushDelay
	Timeout        time.Duration // _TIMEOUT: dial timeout and rueidis ConnWriteTimeout
}

// TLSFiles are the REDIS_TLS_* settings, shared by both targets (as
// envoyproxy/ratelimit shares them).
type TLSFiles struct {
	CACert                   string // REDIS_TLS_CACERT: CA bundle (PEM) added to the system's roots
	ClientCert               string // REDIS_TLS_CLIENT_CERT: client certificate chain (PEM)
	ClientKey                string // REDIS_TLS_CLIENT_KEY: its private key (PEM)
	SkipHostnameVerification bool   // REDIS_TLS_SKIP_HOSTNAME_VERIFICATION: verify the chain, not the name
}

// Startup bounds Open's retries (REDIS_STARTUP_*): the first wait is
// Initial, each next one doubles up to Max, each jittered down by up to
// half; MaxElapsed > 0 gives up after that long, 0 retries until the
// context ends.
type Startup struct {
	Initial    time.Duration
	Max        time.Duration
	MaxElapsed time.Duration
}

// Options are what Open needs.
type Options struct {
	Main Target
	// PerSecond, when not nil (REDIS_PERSECOND=true), is a second Redis
	// for the limits whose unit is the second.
	PerSecond *Target
	TLS       TLSFiles
	Startup   Startup
	// OnRetry, when set, is told of every failed attempt of Open before
	// its wait: the target's description (String), the error and the
	// wait.
	OnRetry func(target string, err error, wait time.Duration)

	// newClient replaces rueidis.NewClient in tests.
	newClient func(rueidis.ClientOption) (rueidis.Client, error)
}
