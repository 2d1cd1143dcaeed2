// Package config holds the service's settings, the hot-reloaded descriptor
// configuration, and the reloadable gRPC server TLS material.
//
// Settings come from the environment, using envoyproxy/ratelimit's variable
// names where that service has them (HOST, GRPC_PORT, RUNTIME_ROOT,
// LIMIT_RESPONSE_HEADERS_ENABLED, GRPC_SERVER_USE_TLS, ...) and ours
// otherwise (CONFIG_DIR, ON_UNAVAILABLE, DYNAMODB_TABLE, ...). Defaults
// lives in one function; FromEnv overlays the environment; RegisterFlags
// adds one flag per variable (lower-cased name) whose default is the value
// at registration, so flags parsed after FromEnv override it; Validate
// checks the combination. Table is the single description of every
// variable, from which the table of docs/settings.md and `ratelimit settings` are
// produced. Durations use Go's syntax (15ms, 10s, 24h); booleans use
// strconv.ParseBool; enumerated values are case-insensitive and stored
// lower-cased.
//
// The store is BACKEND_TYPE's; unset, it is redis when REDIS_URL is set
// (as envoyproxy/ratelimit, whose default store is Redis, and Envoy
// Gateway, which sets REDIS_URL alone, expect), and Settings.BackendInferred
// says so; otherwise memory. The REDIS_* settings are read only on Redis:
// beside another store CheckLegacy names the ones set as ignored.
// RedisOptions hands them to redisclient.Open.
//
// Reloader keeps the live *descriptors.Config behind an atomic.Pointer: a
// request loads it once with Current and uses that immutable value
// throughout. Run watches the descriptor tree with fsnotify — one watch per
// directory, symlinks followed, the list re-synced after every burst so
// that Kubernetes ConfigMap swaps of the ..data link keep being seen — and
// reloads after Debounce of quiet (at most 4×Debounce after the first event
// of a burst), or at once on Trigger (SIGHUP). The nearest existing ancestor
// of the watched directory is watched too, so a directory removed and
// recreated is watched again; a watch that cannot be restored is retried
// every PollInterval while the tree is polled for changes, and WatchProblem
// says why (every reload meanwhile is reported to OnReload as failed). A
// failed load keeps the old configuration, is logged once with every
// problem, and is reported to OnReload; the live configuration is never nil.
// Load and OnReload run outside the Reloader's lock: of loads that overlap,
// the one that started last decides, and OnReload is called one outcome at
// a time, in order, so it may call back into the Reloader.
//
// CertWatcher serves the newest valid certificate, key and client CA to
// every new TLS handshake through GetConfigForClient; Run rereads the files
// on a ticker and keeps the previous material when an update is invalid.
//
// Concurrency: Settings is a plain value. Reloader.Current, Trigger and
// Reload and every CertWatcher method are safe for concurrent use; each
// Run is owned by one goroutine and returns when its context ends, leaving
// no goroutine behind.
package config
