// Package redisclient opens the rueidis clients of the Redis store from
// envoyproxy/ratelimit's REDIS_* settings, under their names and meanings.
//
// Open takes Options (config.Settings.RedisOptions builds them) and
// returns Clients: Main, and PerSecond when REDIS_PERSECOND is set (a
// second Redis for the limits whose unit is the second, with the
// REDIS_PERSECOND_* settings of the same meanings and the same REDIS_TLS_*
// files). Target.String and Options.String describe the targets on one
// line for logs, never with a password; Target.Check and TLSFiles.Check report a wrong setting
// without touching the network or the files.
//
// REDIS_URL, by REDIS_TYPE (case-insensitive):
//
//   - single: host:port, or redis://[user:password@]host[:port][/db] (port
//     6379 by default), or rediss://… for TLS; with REDIS_SOCKET_TYPE=unix,
//     the socket's absolute path (or unix:///path). rueidis is told
//     ForceSingleClient: it never asks a single Redis for cluster slots.
//   - cluster: one or more seeds, comma-separated, each as above; rueidis
//     reads the slots from the first that answers, follows MOVED and ASK,
//     and refreshes the slots on a failover. Database 0 only. One seed that
//     is not in cluster mode is served as a single Redis.
//   - sentinel: mastername,host:port,host:port,…: the master set's name,
//     then the sentinels (rueidis SentinelOption.MasterSet, InitAddress).
//     The sentinels' URLs carry no credentials: REDIS_AUTH is the
//     master's, REDIS_SENTINEL_AUTH the sentinels'. The client follows
//     +switch-master and asks the sentinels again every 5 s.
//
// URLs of one setting must agree on scheme, credentials and database; URL
// options (?…) are refused, not silently dropped.
//
// Each setting becomes (rueidis v1.0.79 ClientOption fields):
//
//   - REDIS_AUTH: Username and Password, split at the first colon
//     (password alone, or user:password); or the URLs' user info, but not
//     both. REDIS_SENTINEL_AUTH: Sentinel.Username and Sentinel.Password,
//     the same way.
//   - REDIS_TLS (or a rediss:// URL): TLSConfig, TLS 1.2 or later, for the
//     nodes and the sentinels alike; the server name is the address
//     dialled, so a cluster's or a sentinel-announced node's certificate
//     must carry its address (or set REDIS_TLS_SKIP_HOSTNAME_VERIFICATION).
//     REDIS_TLS_CACERT adds a CA bundle to the system's roots;
//     REDIS_TLS_CLIENT_CERT and REDIS_TLS_CLIENT_KEY are the client's
//     certificate. REDIS_TLS_SKIP_HOSTNAME_VERIFICATION skips the name
//     check only: the chain is still verified against those roots
//     (VerifyConnection), unlike a bare InsecureSkipVerify.
//   - REDIS_SOCKET_TYPE=unix: a DialCtxFn dialling the socket (single only,
//     no TLS).
//   - REDIS_POOL_SIZE: BlockingPoolSize, the pool of dedicated connections
//     (blocking commands and pipelines of over 2,000 commands). Ordinary
//     calls are pipelined automatically over rueidis' few shared
//     connections per node (PipelineMultiplex, left at its default), so no
//     call waits for a pooled connection.
//   - REDIS_PIPELINE_WINDOW: MaxFlushDelay, the longest the writer waits
//     after a flush to gather more commands (0: flush at once).
//   - REDIS_TIMEOUT: Dialer.Timeout (connect and TLS handshake) and
//     ConnWriteTimeout: a connection whose writes or answers stall that
//     long is closed, failing every call waiting on it, and redialled. A
//     call's own deadline is its context's, which the store sets; rueidis
//     dials a lost connection within the context of the call that finds it
//     lost.
//   - DisableCache: true always: client-side caching is not used.
//   - REDIS_STARTUP_INITIAL_INTERVAL, REDIS_STARTUP_MAX_INTERVAL,
//     REDIS_STARTUP_MAX_ELAPSED_TIME: Open's retries while Redis cannot be
//     reached (Startup).
//   - REDIS_HEALTH_CHECK_ACTIVE_CONNECTION: read by the caller with
//     Clients.Connected, from the connections DialCtxFn counts.
//
// Not read here: REDIS_PIPELINE_LIMIT (envoyproxy/ratelimit ignores it
// too since radix v4; rueidis writes every queued command at each flush)
// and REDIS_CLUSTER_PIPELINE_PARALLELISM (rueidis sends the commands of
// different slots to their nodes concurrently by itself).
//
// Concurrency: Open may be called from any goroutine; Clients' methods and
// the rueidis clients are safe for concurrent use.
package redisclient
