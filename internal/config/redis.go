package config

import (
	"flag"
	"strings"

	"github.com/dynalimit/dynalimit/internal/redisclient"
)

// Values of REDIS_POOL_ON_EMPTY_BEHAVIOR (envoyproxy/ratelimit's, any
// case): only wait is served, as there since radix v4.
const (
	PoolOnEmptyWait   = "wait"
	PoolOnEmptyCreate = "create"
	PoolOnEmptyError  = "error"
)

// redisBindings lists the REDIS_* settings (BACKEND_TYPE=redis), in
// documentation order.
func redisBindings(s *Settings) []binding { //nolint:funlen // a table, one row per setting
	socket := func(p *string) flag.Value {
		return &enumValue{p: p, allowed: []string{redisclient.SocketTCP, redisclient.SocketUnix}}
	}
	kind := func(p *string) flag.Value {
		return &enumValue{p: p, allowed: []string{redisclient.TypeSingle, redisclient.TypeSentinel, redisclient.TypeCluster}}
	}
	onEmpty := func(p *string) flag.Value {
		return &enumValue{p: p, allowed: []string{PoolOnEmptyWait, PoolOnEmptyCreate, PoolOnEmptyError}}
	}
	return []binding{
		{"REDIS_SOCKET_TYPE", "Redis store (BACKEND_TYPE=redis): how REDIS_URL is reached, tcp or unix (a socket path; REDIS_TYPE=single only, no TLS).", socket(&s.RedisSocketType)},
		{"REDIS_TYPE", "single (one Redis), sentinel (REDIS_URL is the master set's name, then the sentinels: mymaster,host:port,…) or cluster (REDIS_URL lists one or more seeds, comma-separated; MOVED, ASK and failovers are followed); any case.", kind(&s.RedisType)},
		{"REDIS_URL", "Address of the Redis store: host:port, redis://[user:password@]host[:port][/db] or rediss://… (TLS); comma-separated seeds for a cluster; mastername,host:port,… for sentinel; the socket's absolute path with REDIS_SOCKET_TYPE=unix. Set while BACKEND_TYPE is unset, it selects the Redis store. Its password is never printed.", (*redisURLValue)(&s.RedisURL)},
		{"REDIS_AUTH", "Redis password, or user:password (split at the first colon), for the nodes (the master behind sentinels); or give them in REDIS_URL, not both. Never printed.", (*secretValue)(&s.RedisAuth)},
		{"REDIS_SENTINEL_AUTH", "Password, or user:password, of the sentinels (REDIS_TYPE=sentinel). Never printed.", (*secretValue)(&s.RedisSentinelAuth)},
		{"REDIS_TLS", "Reach Redis and its sentinels over TLS (1.2 or later), verifying each server's certificate for the address dialled against the system's roots and REDIS_TLS_CACERT. A rediss:// URL turns it on too.", (*boolValue)(&s.RedisTLS)},
		{"REDIS_TLS_CACERT", "CA bundle (PEM file) added to the system's roots to verify the Redis servers (both Redis with REDIS_PERSECOND).", (*stringValue)(&s.RedisTLSCACert)},
		{"REDIS_TLS_CLIENT_CERT", "Client certificate chain (PEM file) presented to Redis, with REDIS_TLS_CLIENT_KEY.", (*stringValue)(&s.RedisTLSClientCert)},
		{"REDIS_TLS_CLIENT_KEY", "Private key (PEM file) of REDIS_TLS_CLIENT_CERT.", (*stringValue)(&s.RedisTLSClientKey)},
		{"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "Accept a Redis certificate that does not name the address dialled (a cluster's nodes announce IPs); its chain is still verified.", (*boolValue)(&s.RedisTLSSkipHostnameVerification)},
		{"REDIS_POOL_SIZE", "Dedicated connections per Redis node, for pipelines of over 2,000 commands. Ordinary calls are pipelined over a few shared connections per node (rueidis' auto-pipelining) and wait for no pooled connection.", (*intValue)(&s.RedisPoolSize)},
		{"REDIS_PIPELINE_WINDOW", "Longest the client waits after each write to Redis to gather more commands into the next (rueidis MaxFlushDelay, on every REDIS_TYPE); 0 writes at once. Fewer system calls for some latency.", (*durationValue)(&s.RedisPipelineWindow)},
		{"REDIS_TIMEOUT", "Longest a Redis connection takes to dial (TLS included), or to write or answer a call, before it is closed, failing the calls waiting on it, and dialled again; a call's own deadline, set by the store, comes first when shorter.", (*durationValue)(&s.RedisTimeout)},
		{"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "Health is NOT_SERVING while the Redis client (either, with REDIS_PERSECOND) holds no open connection to a node.", (*boolValue)(&s.RedisHealthCheckActiveConnection)},
		{"REDIS_POOL_ON_EMPTY_BEHAVIOR", "WAIT. CREATE and ERROR stop the start, as on envoyproxy/ratelimit since radix v4: calls are pipelined over shared connections, and there is no empty pool to create past or fail on.", onEmpty(&s.RedisPoolOnEmptyBehavior)},
		{"REDIS_STARTUP_INITIAL_INTERVAL", "First wait before trying again to connect to Redis at start; each next wait doubles, up to REDIS_STARTUP_MAX_INTERVAL, jittered down by up to half.", (*durationValue)(&s.RedisStartupInitialInterval)},
		{"REDIS_STARTUP_MAX_INTERVAL", "Longest wait between attempts to connect to Redis at start.", (*durationValue)(&s.RedisStartupMaxInterval)},
		{"REDIS_STARTUP_MAX_ELAPSED_TIME", "Stop trying to connect to Redis at start after this long, failing the start; 0 tries until the process is stopped.", (*durationValue)(&s.RedisStartupMaxElapsed)},

		{"REDIS_PERSECOND", "Keep the limits whose unit is the second on a second Redis, reached with the REDIS_PERSECOND_* settings below (the REDIS_TLS_* files and REDIS_STARTUP_* waits are shared).", (*boolValue)(&s.RedisPerSecond)},
		{"REDIS_PERSECOND_SOCKET_TYPE", "REDIS_SOCKET_TYPE of the per-second Redis.", socket(&s.RedisPerSecondSocketType)},
		{"REDIS_PERSECOND_TYPE", "REDIS_TYPE of the per-second Redis.", kind(&s.RedisPerSecondType)},
		{"REDIS_PERSECOND_URL", "REDIS_URL of the per-second Redis. Its password is never printed.", (*redisURLValue)(&s.RedisPerSecondURL)},
		{"REDIS_PERSECOND_AUTH", "REDIS_AUTH of the per-second Redis. Never printed.", (*secretValue)(&s.RedisPerSecondAuth)},
		{"REDIS_PERSECOND_SENTINEL_AUTH", "REDIS_SENTINEL_AUTH of the per-second Redis. Never printed.", (*secretValue)(&s.RedisPerSecondSentinelAuth)},
		{"REDIS_PERSECOND_TLS", "REDIS_TLS of the per-second Redis.", (*boolValue)(&s.RedisPerSecondTLS)},
		{"REDIS_PERSECOND_POOL_SIZE", "REDIS_POOL_SIZE of the per-second Redis.", (*intValue)(&s.RedisPerSecondPoolSize)},
		{"REDIS_PERSECOND_PIPELINE_WINDOW", "REDIS_PIPELINE_WINDOW of the per-second Redis.", (*durationValue)(&s.RedisPerSecondPipelineWindow)},
		{"REDIS_PERSECOND_TIMEOUT", "REDIS_TIMEOUT of the per-second Redis.", (*durationValue)(&s.RedisPerSecondTimeout)},
		{"REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR", "REDIS_POOL_ON_EMPTY_BEHAVIOR of the per-second Redis.", onEmpty(&s.RedisPerSecondPoolOnEmptyBehavior)},
	}
}

// redisURLValue is REDIS_URL: a string whose String masks the passwords of
// its URLs, so that no flag help prints them.
type redisURLValue string

func (v *redisURLValue) Set(s string) error { *v = redisURLValue(s); return nil }
func (v *redisURLValue) String() string {
	if v == nil {
		return ""
	}
	return redisclient.RedactURL(string(*v))
}

// backendValue is BACKEND_TYPE: setting it, from the environment or a
// flag, clears BackendInferred.
type backendValue struct {
	enumValue
	inferred *bool
}

func (v *backendValue) Set(s string) error {
	if err := v.enumValue.Set(s); err != nil {
		return err
	}
	*v.inferred = false
	return nil
}

// envBackend returns the store the environment selects: BACKEND_TYPE
// lower-cased, or redis (inferred) when it is unset and REDIS_URL is set,
// or "" when neither is.
func envBackend(getenv func(string) string) (backend string, inferred bool) {
	if b := strings.ToLower(strings.TrimSpace(getenv("BACKEND_TYPE"))); b != "" {
		return b, false
	}
	if strings.TrimSpace(getenv("REDIS_URL")) != "" {
		return BackendRedis, true
	}
	return "", false
}

// isRedisSetting reports whether name is one of the Redis store's.
func isRedisSetting(name string) bool { return strings.HasPrefix(name, "REDIS_") }

// RedisOptions returns the Redis clients' options: REDIS_* for Main, and
// REDIS_PERSECOND_* for PerSecond when REDIS_PERSECOND is set.
func (s Settings) RedisOptions() redisclient.Options {
	o := redisclient.Options{
		Main: redisclient.Target{
			Setting: "REDIS", SocketType: s.RedisSocketType, Type: s.RedisType, URL: s.RedisURL,
			Auth: s.RedisAuth, SentinelAuth: s.RedisSentinelAuth, TLS: s.RedisTLS,
			PoolSize: s.RedisPoolSize, PipelineWindow: s.RedisPipelineWindow, Timeout: s.RedisTimeout,
		},
		TLS: redisclient.TLSFiles{
			CACert: s.RedisTLSCACert, ClientCert: s.RedisTLSClientCert, ClientKey: s.RedisTLSClientKey,
			SkipHostnameVerification: s.RedisTLSSkipHostnameVerification,
		},
		Startup: redisclient.Startup{
			Initial: s.RedisStartupInitialInterval, Max: s.RedisStartupMaxInterval, MaxElapsed: s.RedisStartupMaxElapsed,
		},
	}
	if s.RedisPerSecond {
		o.PerSecond = &redisclient.Target{
			Setting: "REDIS_PERSECOND", SocketType: s.RedisPerSecondSocketType, Type: s.RedisPerSecondType, URL: s.RedisPerSecondURL,
			Auth: s.RedisPerSecondAuth, SentinelAuth: s.RedisPerSecondSentinelAuth, TLS: s.RedisPerSecondTLS,
			PoolSize: s.RedisPerSecondPoolSize, PipelineWindow: s.RedisPerSecondPipelineWindow, Timeout: s.RedisPerSecondTimeout,
		}
	}
	return o
}

// validateRedis checks the Redis store's settings (BACKEND_TYPE=redis):
// each target's (redisclient.Target.Check), the TLS files' pairing and
// use, the pool-on-empty behaviours and the start's retries.
func (s Settings) validateRedis(p *problems) {
	o := s.RedisOptions()
	targets := []redisclient.Target{o.Main}
	if o.PerSecond != nil {
		targets = append(targets, *o.PerSecond)
	}
	tls := false
	for _, t := range targets {
		if err := t.Check(); err != nil {
			p.add("%v", err)
		}
		tls = tls || t.UsesTLS()
	}
	if err := o.TLS.Check(); err != nil {
		p.add("%v", err)
	}
	for _, f := range []struct{ name, v string }{
		{"REDIS_TLS_CACERT", s.RedisTLSCACert}, {"REDIS_TLS_CLIENT_CERT", s.RedisTLSClientCert}, {"REDIS_TLS_CLIENT_KEY", s.RedisTLSClientKey},
	} {
		if f.v != "" && !tls {
			p.add("%s is set but no Redis is reached over TLS: set REDIS_TLS=true (or use a rediss:// URL)", f.name)
		}
	}
	for _, b := range []struct{ name, v string }{
		{"REDIS_POOL_ON_EMPTY_BEHAVIOR", s.RedisPoolOnEmptyBehavior},
		{"REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR", s.RedisPerSecondPoolOnEmptyBehavior},
	} {
		switch b.v {
		case PoolOnEmptyWait:
		case PoolOnEmptyCreate, PoolOnEmptyError:
			p.add("%s=%s: not served (nor by envoyproxy/ratelimit since radix v4): calls are pipelined over shared connections, there is no empty pool; use WAIT", b.name, strings.ToUpper(b.v))
		default:
			p.enum(b.name, b.v, PoolOnEmptyWait)
		}
	}
	if s.RedisStartupInitialInterval <= 0 {
		p.add("REDIS_STARTUP_INITIAL_INTERVAL=%s: want a duration > 0", s.RedisStartupInitialInterval)
	}
	if s.RedisStartupMaxInterval < s.RedisStartupInitialInterval {
		p.add("REDIS_STARTUP_MAX_INTERVAL=%s is below REDIS_STARTUP_INITIAL_INTERVAL=%s", s.RedisStartupMaxInterval, s.RedisStartupInitialInterval)
	}
	if s.RedisStartupMaxElapsed < 0 {
		p.add("REDIS_STARTUP_MAX_ELAPSED_TIME=%s: want a duration ≥ 0 (0: retry until stopped)", s.RedisStartupMaxElapsed)
	}
}
