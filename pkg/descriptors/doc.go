// Package descriptors parses, validates and compiles rate-limit descriptor
// configuration, and matches request descriptors against it.
//
// The YAML is a strict superset of envoyproxy/ratelimit's: every file that
// service loads loads here with the same meaning — domain, nested
// descriptors, key, value, rate_limit{unit, requests_per_unit,
// unit_multiplier, name, unlimited, replaces}, shadow_mode, quota_mode,
// detailed_metric, value_to_metric, share_threshold, metadata and wildcard
// values. Keys envoyproxy/ratelimit accepts but ignores where they stand
// (it checks keys against one flat list) are ignored here too and reported
// by Config.Warnings. The extensions are `namespace:` per file, `limits:`
// (several named limits on one node), `burst:` and `charge: pre|post` on a
// limit, and `entity:`, `resource:` and `cascade:` on a level.
//
// `adjustments:` (adjust.go) lists, per domain, the limits settled after
// the response and where an access-log entry carries the actual cost (a
// response header or trailer, or a dynamic-metadata key): each names a
// named limit of the domain's rules, or selects a rule by its descriptor
// path (the only way to reach the unnamed limits Envoy Gateway pushes over
// xDS). A file may hold adjustments only, for a domain whose rules are in
// another file; with Options.AdjustmentsOnly every file does, and
// Config.WithAdjustments merges them with rules that arrived elsewhere,
// leaving out (and reporting) those that select no limit.
//
// A file's `namespace:` places its rules' buckets and stored limits in that
// namespace; the rules of a file without one have Rule.Namespace "", which
// means the deployment's namespace (the service's NAMESPACE setting), not a
// namespace of its own.
//
// Parse reports every problem of every file at once (*Error), each with its
// file, line and key; an unknown key names the nearest key accepted where
// it stands (hint.go), and an invalid unit the valid ones. Reading is in two layers: a strict YAML-node reader
// (yamlnode.go: string and unique keys, typed scalars with yaml.v2's
// spellings, aliases and merge keys followed with bounds, a per-file budget
// of nodes visited with aliases expanded) under the descriptor schema
// (parse.go for files and descriptors, limits.go for rate_limit and
// limits:). Descriptors nest at most MaxDepth levels. LoadDir reads a directory the way envoyproxy/ratelimit's
// runtime loader does, Kubernetes ConfigMap layout included.
//
// Matching follows envoyproxy/ratelimit's GetLimit: per level, the exact key
// and value, then the level's wildcard values in load order ('*' matches any
// run of characters, anywhere in the value, any number of times), then the
// key alone; the rule applies only when its node is reached at the request's
// last entry. A rule's buckets are identified by Match.EntityID, an injective
// encoding of the request entries in which a share_threshold level stands for
// every value matching its pattern.
//
// Units: RequestsPerUnit and Burst are whole requests (tokens); periods are
// Unit.Duration()·UnitMultiplier, with a week of 7 days, a month of 30 and a
// year of 365. Each limit carries its tokenbucket.Limit, where
// requests_per_unit: 0 sets Deny instead.
//
// Concurrency: a Config is immutable once Parse returns and safe for
// concurrent use; Match does not allocate on exact and key-only paths. The
// package performs no logging and, apart from LoadDir, no I/O.
package descriptors
