// Package xdsconfig receives the descriptor configuration over xDS, as
// envoyproxy/ratelimit does with CONFIG_TYPE=GRPC_XDS_SOTW and as Envoy
// Gateway serves it: an aggregated (ADS) state-of-the-world subscription to
// type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig, one
// resource per domain.
//
// Every response is a full replacement: its resources are converted to
// descriptor YAML (ToFile) and compiled by descriptors.Parse, exactly as
// files are, so a pushed configuration is held to the same validation. A
// configuration that compiles replaces the live one atomically and is
// ACKed; one that does not is NACKed with the problems, and the live one
// keeps serving.
//
// The resource has no field for adjustments (post-response costs), so they
// come from files (descriptors.Options.AdjustmentsOnly) through
// SetAdjustments and are merged by domain with every pushed configuration.
// An adjustment that selects no limit of the pushed rules is logged and left
// out; the push is still applied and ACKed, so that a local file never holds
// back the gateway's rules.
//
// The client keeps one gRPC channel to the management server for its
// lifetime. The channel reconnects on its own every ConnectRetryInterval
// while the server cannot be reached; a stream that breaks (the server
// restarted, say) is opened again after an exponential backoff, which
// starts over once a new stream has delivered a response. A new stream
// asks for the configuration afresh, so the server resends it in full.
//
// Current is safe for concurrent use and costs one atomic load; the
// configuration it returns is immutable. Run must be called at most once.
package xdsconfig
