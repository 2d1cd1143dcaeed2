// Package metrics holds every Prometheus collector of the rate-limit service
// and the small methods that the service, the server and the stores call to
// record what happened.
//
// All metric names start with "ratelimit_". Labels are bounded: a domain
// (only domains present in the loaded configuration; others are reported as
// "unknown"), a rule key path (descriptors.Match.MetricKey, which carries
// request values only when a rule asks for detailed_metric or
// value_to_metric), a response code, an outcome or a reason from a fixed set.
// Entity ids and raw request values are never labels.
//
// Units: durations are observed in seconds, memory in bytes, hits in whole
// request hits (not millitokens).
//
// A *Metrics is safe for concurrent use. Every method is also safe on a nil
// *Metrics and then does nothing, so callers need not check whether metrics
// are enabled.
package metrics
